"""Probe: share one CUDA allocation with a child through an inherited POSIX fd (CUDA VMM API),
with the exporting parent non-dumpable, and the child in user+mount+net namespaces with an empty
private /dev/shm. If this works, the verifier needs no dumpable window and no host IPC files."""
import ctypes
import os
import subprocess
import sys
import time

cu = ctypes.CDLL("libcuda.so.1")


class Loc(ctypes.Structure):
    _fields_ = [("type", ctypes.c_int), ("id", ctypes.c_int)]


class Flags(ctypes.Structure):
    _fields_ = [("compressionType", ctypes.c_ubyte), ("gpuDirectRDMACapable", ctypes.c_ubyte),
                ("usage", ctypes.c_ushort), ("reserved", ctypes.c_ubyte * 4)]


class Prop(ctypes.Structure):
    _fields_ = [("type", ctypes.c_int), ("requestedHandleTypes", ctypes.c_int), ("location", Loc),
                ("win32HandleMetaData", ctypes.c_void_p), ("allocFlags", Flags)]


class Access(ctypes.Structure):
    _fields_ = [("location", Loc), ("flags", ctypes.c_int)]


def ck(r, what):
    if r != 0:
        name = ctypes.c_char_p()
        cu.cuGetErrorName(r, ctypes.byref(name))
        raise RuntimeError(f"{what}: {r} {name.value}")


def prop(dev):
    p = Prop()
    p.type = 1  # PINNED
    p.requestedHandleTypes = 1  # POSIX fd
    p.location = Loc(1, dev)
    return p


def map_handle(handle, size, dev):
    ptr = ctypes.c_uint64()
    ck(cu.cuMemAddressReserve(ctypes.byref(ptr), ctypes.c_size_t(size), ctypes.c_size_t(0), ctypes.c_uint64(0), ctypes.c_uint64(0)), "reserve")
    ck(cu.cuMemMap(ptr, ctypes.c_size_t(size), ctypes.c_size_t(0), handle, ctypes.c_uint64(0)), "map")
    acc = Access(Loc(1, dev), 3)
    ck(cu.cuMemSetAccess(ptr, ctypes.c_size_t(size), ctypes.byref(acc), ctypes.c_size_t(1)), "access")
    return ptr.value


class CAI:
    def __init__(self, ptr, n):
        self.__cuda_array_interface__ = {"shape": (n,), "typestr": "|u1", "data": (ptr, False), "version": 3}


def tensor(ptr, n):
    import torch
    return torch.as_tensor(CAI(ptr, n), device="cuda")


def child(fd, size):
    t0 = time.perf_counter()
    import torch
    t1 = time.perf_counter()
    torch.cuda.set_device(0)
    torch.zeros(1, device="cuda")
    t2 = time.perf_counter()
    h = ctypes.c_uint64()
    ck(cu.cuMemImportFromShareableHandle(ctypes.byref(h), ctypes.c_void_p(fd), 1), "import")
    ptr = map_handle(h, size, 0)
    t = tensor(ptr, size)
    s = int(t[:1 << 20].to(torch.int64).sum())
    t[:1 << 20].fill_(7)
    torch.cuda.synchronize()
    t3 = time.perf_counter()
    shm = os.listdir("/dev/shm")
    dump = open("/proc/self/status").read().split("Dumpable")[0][-0:] if False else ""
    print(f"child: sum_before={s} import_torch={t1-t0:.2f}s cuda_init={t2-t1:.2f}s import_map={t3-t2:.3f}s shm={shm} uid={os.getuid()}", flush=True)


def parent():
    import torch
    torch.cuda.set_device(0)
    torch.zeros(1, device="cuda")
    size_req = 64 << 20
    p = prop(0)
    g = ctypes.c_size_t()
    ck(cu.cuMemGetAllocationGranularity(ctypes.byref(g), ctypes.byref(p), 0), "granularity")
    size = (size_req + g.value - 1) // g.value * g.value
    h = ctypes.c_uint64()
    ck(cu.cuMemCreate(ctypes.byref(h), ctypes.c_size_t(size), ctypes.byref(p), ctypes.c_uint64(0)), "create")
    ptr = map_handle(h, size, 0)
    t = tensor(ptr, size)
    t[:1 << 20].fill_(3)
    torch.cuda.synchronize()
    fd = ctypes.c_int(-1)
    ck(cu.cuMemExportToShareableHandle(ctypes.byref(fd), h, 1, ctypes.c_uint64(0)), "export")
    os.set_inheritable(fd.value, True)
    libc = ctypes.CDLL(None)
    assert libc.prctl(4, 0, 0, 0, 0) == 0  # non-dumpable parent
    print(f"parent: granularity={g.value} size={size} fd={fd.value} dumpable={libc.prctl(3,0,0,0,0)}", flush=True)
    for label, pre in [("plain", []),
                       ("userns+private shm", ["unshare", "--user", "--map-root-user", "--mount", "--net", "--",
                                               "sh", "-c", 'mount -t tmpfs tmpfs /dev/shm && exec "$@"', "sh"])]:
        t[:1 << 20].fill_(3)
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        r = subprocess.run(pre + [sys.executable, __file__, "--child", str(fd.value), str(size)], pass_fds=(fd.value,),
                           capture_output=True, text=True, timeout=120)
        torch.cuda.synchronize()
        after = int(t[:1 << 20].to(torch.int64).sum())
        print(f"[{label}] rc={r.returncode} wall={time.perf_counter()-t0:.2f}s parent_sum_after={after} (expect {7 << 20}); "
              f"child says: {r.stdout.strip()} {r.stderr.strip()[-1500:]}", flush=True)
    # Contrast: torch's legacy CUDA IPC from a non-dumpable parent into a user namespace.
    from torch.multiprocessing.reductions import reduce_tensor
    import pickle, base64
    buf = torch.ones(1 << 20, dtype=torch.uint8, device="cuda")
    recipe = base64.b64encode(pickle.dumps(reduce_tensor(buf))).decode()
    code = ("import sys,pickle,base64,torch; torch.cuda.set_device(0); fn,a=pickle.loads(base64.b64decode(sys.argv[1])); "
            "t=fn(*a); print('legacy ipc ok', int(t.sum()))")
    r = subprocess.run(["unshare", "--user", "--map-root-user", "--mount", "--net", "--", sys.executable, "-c", code, recipe],
                       capture_output=True, text=True, timeout=120)
    print(f"[legacy IPC, non-dumpable parent, userns child] rc={r.returncode} {r.stdout.strip()} {r.stderr.strip()[-600:]}")


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "--child":
        child(int(sys.argv[2]), int(sys.argv[3]))
    else:
        parent()
