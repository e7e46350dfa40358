"""ckpt_edit.py -- edit a ddptrain checkpoint the way a user with h5py could,
for tests/e2e/test_ckpt_trust.sh.  With --resign the dataset checksums and the
metadata checksum are recomputed afterwards (a Python copy of hash_words,
src/ground/hash.h, and of the algorithm in src/train/ckpt_verify.h), so that
only the range and finiteness checks stand between the edit and a resume.

usage: ckpt_edit.py FILE [--resign] EDIT...
  attr:NAME=INT        set root attribute NAME (int64)
  gattr:GROUP:NAME=INT set attribute NAME of GROUP (int64)
  unsign:DATASET       remove DATASET's checksum attribute
  add:DATASET=FLOAT    add FLOAT to every element of DATASET
  set:DATASET=FLOAT    set element 0 of DATASET to FLOAT (nan, inf, -1, ...)
"""
import sys

import h5py
import numpy as np

MASK = (1 << 64) - 1
SEED = 0xCBF29CE484222325
PRIME = 0x100000001B3


def hash_bytes(h, data):
    for b in data:
        h = ((h ^ b) * PRIME) & MASK
    return h


def hash_words(h, data):
    n = len(data)
    lane = [h, h ^ 0x9E3779B97F4A7C15, h ^ 0xC2B2AE3D27D4EB4F, h ^ 0x165667B19E3779F9]
    i = 0
    while i + 32 <= n:
        for k in range(4):
            w = int.from_bytes(data[i + 8 * k:i + 8 * k + 8], "little")
            v = ((lane[k] ^ w) * PRIME) & MASK
            lane[k] = v ^ (v >> 29)
        i += 32
    out = hash_bytes(SEED, b"".join(x.to_bytes(8, "little") for x in lane))
    out = hash_bytes(out, n.to_bytes(8, "little"))
    return hash_bytes(out, data[i:])


def item(h, tag, value):
    h = hash_bytes(h, tag)
    h = hash_bytes(h, len(value).to_bytes(8, "little"))
    return hash_bytes(h, value)


def hash_attrs(h, obj):
    for name in sorted(k for k in obj.attrs.keys() if k != "meta_checksum"):
        h = hash_bytes(h, name.encode() + b"\0")
        aid = obj.attrs.get_id(name)
        cls = aid.get_type().get_class()
        v = obj.attrs[name]
        if cls == h5py.h5t.STRING:
            raw = v.encode() if isinstance(v, str) else bytes(v)
            h = item(h, b"s", raw.split(b"\0")[0])
        elif cls == h5py.h5t.INTEGER:
            h = item(h, b"i", np.asarray(v).astype("<i8").tobytes())
        elif cls == h5py.h5t.FLOAT:
            h = item(h, b"f", np.asarray(v).astype("<f8").tobytes())
        else:
            size = aid.get_type().get_size()
            h = item(h, b"o", np.array([cls, size], "<i8").tobytes())
    return h


def meta_checksum(f):
    groups, sets = [], []
    f.visititems(lambda n, o: (sets if isinstance(o, h5py.Dataset) else groups).append(n))
    h = hash_attrs(SEED, f)
    for name in sorted(groups):
        h = hash_bytes(h, name.encode() + b"\0")
        h = hash_attrs(h, f[name])
    for name in sorted(sets):
        s = f[name].attrs["checksum"]
        s = s.encode() if isinstance(s, str) else bytes(s)
        h = hash_bytes(h, name.encode() + b"\0" + s + b"\0")
    return "%016x" % h


def sign_dataset(ds):
    ds.attrs["checksum"] = np.bytes_("%016x" % hash_words(SEED, ds[()].tobytes()))


def main(argv):
    path, edits = argv[1], argv[2:]
    resign = "--resign" in edits
    edits = [e for e in edits if e != "--resign"]
    changed = []
    with h5py.File(path, "r+") as f:
        for e in edits:
            kind, _, rest = e.partition(":")
            if kind == "attr":
                name, _, v = rest.partition("=")
                f.attrs[name] = np.int64(int(v))
            elif kind == "gattr":
                group, _, rest = rest.partition(":")
                name, _, v = rest.partition("=")
                f[group].attrs[name] = np.int64(int(v))
            elif kind == "unsign":
                del f[rest].attrs["checksum"]
            elif kind in ("add", "set"):
                name, _, v = rest.partition("=")
                a = f[name][()]
                if kind == "add":
                    a = a + np.float32(float(v))
                else:
                    a.flat[0] = np.float32(float(v))
                f[name][...] = a
                changed.append(name)
            else:
                sys.exit("ckpt_edit.py: unknown edit " + e)
        if resign:
            for name in changed:
                if "checksum" in f[name].attrs:
                    sign_dataset(f[name])
            f.attrs["meta_checksum"] = np.bytes_(meta_checksum(f))


if __name__ == "__main__":
    main(sys.argv)
