"""``model.py`` (and ``train.py``) on PyTorch: the same source with its import lines pointed at torch.

This is the porting claim made executable: the tests and ``benchmarks/gpt_step.py`` build the
PyTorch twin of the jgrad GPT from the very same file, give both the same weights, and compare.
"""
import os
import sys
import types

HERE = os.path.dirname(os.path.abspath(__file__))
JGRAD_IMPORTS = ("import jgrad as torch\n", "import jgrad.nn as nn\n", "from jgrad.nn import functional as F\n")
TORCH_IMPORTS = ("import torch\n", "import torch.nn as nn\n", "from torch.nn import functional as F\n")


def load_model(backend="jgrad", path=os.path.join(HERE, "model.py")):
    """``model.py`` as a module running on ``backend`` ('jgrad' or 'torch')."""
    return load(path, backend, required=JGRAD_IMPORTS)


def load(path, backend="jgrad", required=JGRAD_IMPORTS[:1]):
    """The Python file ``path`` as a module, its jgrad import lines pointed at ``backend``'s."""
    if backend not in ("jgrad", "torch"):
        raise ValueError(f"backend must be 'jgrad' or 'torch', got {backend!r}")
    with open(path) as f:
        source = f.read()
    for line in required:
        if line not in source:
            raise RuntimeError(f"{path} no longer has the import line {line.strip()!r}")
    name = f"gpt_{os.path.splitext(os.path.basename(path))[0]}_{backend}"
    if backend == "torch":
        for old, new in zip(JGRAD_IMPORTS, TORCH_IMPORTS):
            source = source.replace(old, new)
    module = types.ModuleType(name)
    module.__file__ = path
    sys.modules[name] = module  # dataclasses look their module up
    exec(compile(source, f"{path} ({backend})", "exec"), module.__dict__)
    return module


def load_train(backend="jgrad"):
    """``train.py`` as a module running on ``backend`` (its data pipeline, schedule and step)."""
    return load(os.path.join(HERE, "train.py"), backend)
