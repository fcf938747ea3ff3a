"""A process's own file API and its own mappings of the file: one copy, as with the kernel's
unified page cache. Bytes written with write, pwrite, writev, pwritev, copy_file_range,
sendfile and splice are seen at once through every mapping; stores through a writable
mapping are seen at once by read, pread, preadv, copy_file_range and sendfile out of the
file and by a second mapping; ftruncate and fallocate (punch, zero) change what the
mappings show."""
import ctypes
import json
import mmap
import os
import sys

SERVED = [r"/data\.bin$"]
# Read-only first, then writable: Umap cannot turn its read-only mapping writable in place.
MAY_DECLINE = [r"/upgrade\.bin$"]
SIZE = 256 << 10
FALLOC_FL_KEEP_SIZE, FALLOC_FL_PUNCH_HOLE, FALLOC_FL_ZERO_RANGE = 1, 2, 16


def fallocate(fd, mode, off, length):
    libc = ctypes.CDLL(None, use_errno=True)
    libc.fallocate.argtypes = [ctypes.c_int, ctypes.c_int, ctypes.c_long, ctypes.c_long]
    if libc.fallocate(fd, mode, off, length) != 0:
        e = ctypes.get_errno()
        raise OSError(e, os.strerror(e))


def run(d):
    seen = {}
    path = os.path.join(d, "data.bin")
    with open(path, "wb") as f:
        f.write(bytes(range(256)) * (SIZE // 256))
    other = os.path.join(d, "other.bin")
    with open(other, "wb") as f:
        f.write(b"O" * 8192)
    fd = os.open(path, os.O_RDWR)
    rw = mmap.mmap(fd, SIZE)
    ro = mmap.mmap(fd, SIZE, mmap.MAP_SHARED, mmap.PROT_READ)
    seen["first"] = ro[100]
    # Writes through the file API, seen by the read-only mapping.
    os.pwrite(fd, b"P", 100)
    seen["pwrite"] = ro[100]
    os.lseek(fd, 5000, os.SEEK_SET)
    os.write(fd, b"W" * 3)
    seen["write"] = bytes(ro[5000:5003]).decode()
    os.pwritev(fd, [b"v1", b"v2"], 70000)
    seen["pwritev"] = bytes(ro[70000:70004]).decode()
    os.lseek(fd, 9000, os.SEEK_SET)
    os.writev(fd, [b"x", b"yz"])
    seen["writev"] = bytes(ro[9000:9003]).decode()
    src = os.open(other, os.O_RDONLY)
    os.copy_file_range(src, fd, 16, 0, 12288)
    seen["copy_file_range_in"] = bytes(ro[12288:12304]).decode()
    os.lseek(fd, 20000, os.SEEK_SET)
    os.sendfile(fd, src, 0, 8)
    seen["sendfile_in"] = bytes(ro[20000:20008]).decode()
    r, w = os.pipe()
    os.write(w, b"SPLICE")
    os.splice(r, fd, 6, offset_dst=30000)
    seen["splice_in"] = bytes(ro[30000:30006]).decode()
    # Stores through the writable mapping, seen by the file API and by the other mapping.
    rw[40000:40005] = b"STORE"
    seen["second_mapping"] = bytes(ro[40000:40005]).decode()
    seen["pread"] = os.pread(fd, 5, 40000).decode()
    os.lseek(fd, 40000, os.SEEK_SET)
    seen["read"] = os.read(fd, 5).decode()
    buf = bytearray(5)
    os.preadv(fd, [buf], 40000)
    seen["preadv"] = buf.decode()
    dst = os.open(os.path.join(d, "copy.bin"), os.O_RDWR | os.O_CREAT, 0o644)
    os.copy_file_range(fd, dst, 5, 40000, 8)
    seen["copy_file_range_out"] = os.pread(dst, 5, 8).decode()
    os.sendfile(dst, fd, 40000, 5)  # at dst's offset, 0
    seen["sendfile_out"] = os.pread(dst, 5, 0).decode()
    # fallocate: punched and zeroed ranges read as zeros through both mappings.
    fallocate(fd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, 65536, 8192)
    seen["punch"] = [ro[65536], rw[73727], ro[73729]]
    fallocate(fd, FALLOC_FL_ZERO_RANGE, 81920, 4096)
    seen["zero_range"] = [ro[81920], rw[86015], ro[86017]]
    # ftruncate: shrink, then grow again; the bytes in between read as zeros.
    os.ftruncate(fd, 100000)
    os.ftruncate(fd, SIZE)
    seen["truncate_regrow"] = [ro[99999], ro[100000], rw[200000]]
    rw.flush()
    ro.close()
    rw.close()
    os.close(fd)
    with open(path, "rb") as f:
        data = f.read()
    seen["file_size"] = len(data)
    seen["file_has_store"] = data[40000:40005].decode()
    seen["file_sum"] = sum(data) % 1000003
    # Read-only first, then writable: one copy either way (the shim declines this file to
    # the kernel: Umap cannot turn a read-only mapping writable).
    up = os.path.join(d, "upgrade.bin")
    with open(up, "wb") as f:
        f.write(b"u" * 65536)
    fd = os.open(up, os.O_RDWR)
    first = mmap.mmap(fd, 65536, mmap.MAP_SHARED, mmap.PROT_READ)
    _ = first[10]
    second = mmap.mmap(fd, 65536)
    second[10:12] = b"UP"
    seen["read_only_then_writable"] = bytes(first[10:12]).decode()
    second.flush()
    first.close()
    second.close()
    os.close(fd)
    return seen


if __name__ == "__main__":
    print(json.dumps(run(sys.argv[1]), sort_keys=True))
