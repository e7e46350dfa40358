/* deck.c -- input decks: open, validate, read (see deck.h). */
#include "deck.h"

#include <stdio.h>
#include <string.h>

#include "h5util.h"

int deck_has_split(const char *path, const char *split)
{
    hid_t f;
    if (h5_open_read(path, &f) != DDP_OK) {
        ddp_clear_error();
        return 0;
    }
    char name[32];
    snprintf(name, sizeof name, "/%s/x", split);
    int yes = h5_exists(f, name);
    h5_lock();
    H5Fclose(f);
    h5_unlock();
    return yes;
}

typedef struct cfg_iter {
    ddp_config_t *cfg;
    const char *path;
    ddp_status_t status;
} cfg_iter_t;

/* Render one /config attribute as text and apply it. */
static herr_t config_attr_(hid_t loc, const char *name, const H5A_info_t *info, void *arg)
{
    cfg_iter_t *it = arg;
    char where[4200], text[CONFIG_STR_MAX];
    snprintf(where, sizeof where, "%s: attribute /config/%s", it->path, name);
    hid_t at = H5Aopen(loc, name, H5P_DEFAULT);
    hid_t t = at < 0 ? -1 : H5Aget_type(at);
    hid_t sp = at < 0 ? -1 : H5Aget_space(at);
    H5T_class_t cls = t < 0 ? H5T_NO_CLASS : H5Tget_class(t);
    ddp_status_t s = DDP_OK;
    if (sp < 0 || H5Sget_simple_extent_npoints(sp) != 1) {
        s = ddp_fail(DDP_ERR_INPUT, "%s: must be a single value", where);
    } else if (cls == H5T_INTEGER) {
        long long v;
        if (H5Aread(at, H5T_NATIVE_LLONG, &v) < 0)
            s = ddp_fail(DDP_ERR_INPUT, "%s: unreadable", where);
        snprintf(text, sizeof text, "%lld", v);
    } else if (cls == H5T_FLOAT) {
        double v;
        if (H5Aread(at, H5T_NATIVE_DOUBLE, &v) < 0)
            s = ddp_fail(DDP_ERR_INPUT, "%s: unreadable", where);
        snprintf(text, sizeof text, "%.17g", v);
    } else if (cls == H5T_STRING) {
        s = h5_attr_read_str(loc, name, text, sizeof text);
        if (s != DDP_OK) s = ddp_fail_override(DDP_ERR_INPUT, "%s: unreadable string", where);
    } else {
        s = ddp_fail(DDP_ERR_INPUT, "%s: must be a string or a number", where);
    }
    if (sp >= 0) H5Sclose(sp);
    if (t >= 0) H5Tclose(t);
    if (at >= 0) H5Aclose(at);
    if (s == DDP_OK) s = config_set(it->cfg, name, text, SRC_INPUT, where);
    it->status = s;
    return s == DDP_OK ? 0 : 1;
}

ddp_status_t deck_load_config(const char *path, ddp_config_t *cfg)
{
    hid_t f;
    DDP_TRY(h5_open_read(path, &f));
    cfg_iter_t it = {cfg, path, DDP_OK};
    h5_lock();
    if (H5Lexists(f, "/config", H5P_DEFAULT) > 0) {
        hid_t g = H5Gopen2(f, "/config", H5P_DEFAULT);
        hsize_t idx = 0;
        if (g >= 0) {
            H5Aiterate2(g, H5_INDEX_NAME, H5_ITER_INC, &idx, config_attr_, &it);
            H5Gclose(g);
        }
    }
    H5Fclose(f);
    h5_unlock();
    return it.status;
}
