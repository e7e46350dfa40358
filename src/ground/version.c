/* version.c -- the program's version (configure's PACKAGE_VERSION). */
#include "version.h"

#include "ddp_build.h"

const char *ddp_version(void)
{
    return PACKAGE_VERSION;
}
