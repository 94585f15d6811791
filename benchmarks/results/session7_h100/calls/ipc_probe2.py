"""Which step of confine breaks CUDA IPC (run under unshare --user --map-root-user --mount --net)."""
import base64, os, pickle, subprocess, sys, time

CHILD = r'''
import base64, os, pickle, sys
steps = sys.argv[2].split(",")
from kernelopt.harness import confine
writable = ["/tmp"] + (["/dev/shm"] if "shm_rw" in steps else [])
if "shm_file" in steps:
    writable += [p for p in sys.argv[3].split(":") if p]
if "ro" in steps:
    confine.read_only_view([os.path.realpath(p) for p in writable])
if "limits" in steps:
    confine.set_limits(cpu_only=False)
if "caps" in steps:
    confine.drop_capabilities()
import torch
fn, args = pickle.loads(base64.b64decode(sys.argv[1]))
torch.cuda.set_device(0)
try:
    t = fn(*args)
    print("OK", float(t[:4].float().sum()))
except Exception as e:
    print("FAIL", type(e).__name__, str(e).splitlines()[0])
'''

def main():
    import torch
    from torch.multiprocessing.reductions import reduce_tensor
    buf = torch.ones(1 << 20, dtype=torch.uint8, device="cuda")
    recipe = reduce_tensor(buf)
    handle = base64.b64encode(pickle.dumps(recipe)).decode()
    print("recipe args:", [a if not isinstance(a, (bytes, bytearray)) or len(a) < 80 else f"<{len(a)} bytes>" for a in recipe[1]], flush=True)
    shm_files = [f"/dev/shm/{a.decode().lstrip('/')}" for a in recipe[1] if isinstance(a, bytes) and a.startswith(b"/torch")]
    print("shm files:", shm_files, os.listdir("/dev/shm")[:10], flush=True)
    pre = ["unshare", "--user", "--map-root-user", "--mount", "--net", "--kill-child", "--"]
    for steps in ["none", "ro", "limits", "caps", "ro,shm_rw", "ro,shm_file", "ro,shm_rw,limits,caps", "ro,shm_file,limits,caps"]:
        t0 = time.monotonic()
        p = subprocess.run([*pre, sys.executable, "-c", CHILD, handle, steps, ":".join(shm_files)], capture_output=True, text=True, timeout=60)
        print(f"{steps:26} rc={p.returncode} {time.monotonic()-t0:5.1f}s {p.stdout.strip()[:150]} {p.stderr.strip().splitlines()[-1][:200] if p.stderr.strip() else ''}", flush=True)

main()
