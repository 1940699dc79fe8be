# Sourced by the lent-GPU scripts (paper_gpu.sh, nao_paper_gpu.sh, darcy_race_gpu.sh) after they set
# ``out``: ``here`` (this folder), the project on PYTHONPATH, unbuffered output, ``out`` created, and
# the device and torch version printed (the first line of every such run's record).
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
export PYTHONUNBUFFERED=1 PYTHONPATH="$(dirname "$here")${PYTHONPATH:+:$PYTHONPATH}"
mkdir -p "$out"
python3 -c "import torch; print('device:', torch.cuda.get_device_name(0) if torch.cuda.is_available() else 'cpu',
    'torch', torch.__version__)"
