/* main.c -- ddptrain: everything lives in libddp (train.c); this is the door. */
#include "train.h"

int main(int argc, char **argv)
{
    return ddp_main(argc, argv);
}
