# sourced at the start of every GPU call
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl/*.whl >/dev/null 2>&1 || echo "wheel install failed"
export PYTHONPATH=/tmp/site:$PWD TRITON_INTERPRET=0 PYTHONUNBUFFERED=1
python3 -m pip install -q --no-deps --no-build-isolation -e . >/dev/null 2>&1 || echo "editable install failed"
export PATH=$PATH:/usr/local/bin
prov() { { echo "date: $(date -u +%FT%TZ)"; echo "commit: $KERNELOPT_COMMIT"; nvidia-smi --query-gpu=name,driver_version --format=csv,noheader; python3 -c "import torch,triton,sys;print('torch',torch.__version__,'triton',triton.__version__,'python',sys.version.split()[0])"; which ncu && ncu --version | tail -1; } > $OUT/provenance_$1.txt 2>&1; }
