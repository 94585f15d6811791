for c in "pass" "import torch" "import torch, triton" "import torch; torch.zeros(1, device='cuda')" "import torch, triton; import kernelopt.harness.runner" ; do
  /usr/bin/time -f "%e s  $c" python3 -c "$c" 2>&1 | tail -1
done
