"""Which namespace breaks CUDA IPC: parent exports a CUDA tensor, child (under variants of unshare) maps it."""
import base64, os, pickle, subprocess, sys, time

CHILD = r'''
import base64, pickle, sys, torch
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
    handle = base64.b64encode(pickle.dumps(reduce_tensor(buf))).decode()
    variants = {
        "plain": [],
        "user": ["unshare", "--user", "--map-root-user", "--"],
        "user+mount": ["unshare", "--user", "--map-root-user", "--mount", "--"],
        "user+net": ["unshare", "--user", "--map-root-user", "--net", "--"],
        "user+mount+net": ["unshare", "--user", "--map-root-user", "--mount", "--net", "--kill-child", "--"],
        "user+ipc": ["unshare", "--user", "--map-root-user", "--ipc", "--"],
        "user+pid": ["unshare", "--user", "--map-root-user", "--pid", "--fork", "--mount-proc", "--"],
        "mount(root,no user)": ["unshare", "--mount", "--"],
        "net(root,no user)": ["unshare", "--net", "--"],
        "confine(full)": ["unshare", "--user", "--map-root-user", "--mount", "--net", "--kill-child", "--",
                          sys.executable, "-m", "kernelopt.harness.confine", "/tmp", "--"],
    }
    for name, pre in variants.items():
        t0 = time.monotonic()
        p = subprocess.run([*pre, sys.executable, "-c", CHILD, handle], capture_output=True, text=True, timeout=60,
                           env={**os.environ, "KERNELOPT_SANDBOX_DEVICE": "cuda"})
        print(f"{name:22} rc={p.returncode} {time.monotonic()-t0:5.1f}s {p.stdout.strip()[:150]} {p.stderr.strip().splitlines()[-1][:200] if p.stderr.strip() else ''}", flush=True)

main()
