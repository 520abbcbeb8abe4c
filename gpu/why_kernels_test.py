"""Issue 39 item 1 on the H200 (copied into a scratch project by gpu/why_check.sh): steps whose kernels change.

``CONV_LAYOUT=nchw`` runs the conv forward+backward in NCHW instead of channels_last (cuDNN adds a layout kernel);
``LINEAR_WIDTH=4504`` runs the seed's Linear at width 4504 instead of 4096 (cuBLAS switches its GEMM kernels).
"""

import os

import torch
from torch import nn

CHANNELS_LAST = os.environ.get("CONV_LAYOUT", "channels_last") == "channels_last"
WIDTH = int(os.environ.get("LINEAR_WIDTH", "4096"))


def test_conv(gpuperf):
    torch.manual_seed(0)
    conv = nn.Conv2d(128, 128, 3, padding=1).to(gpuperf.device, torch.float16)
    x = torch.randn(64, 128, 56, 56, device=gpuperf.device, dtype=torch.float16, requires_grad=True)
    if CHANNELS_LAST:
        conv = conv.to(memory_format=torch.channels_last)
        x = x.detach().to(memory_format=torch.channels_last).requires_grad_(True)

    def step():
        conv.zero_grad(set_to_none=True)
        x.grad = None
        conv(x).sum().backward()

    gpuperf.measure(step, items=64, unit="images")


def test_linear(gpuperf):
    torch.manual_seed(0)
    layer = nn.Linear(WIDTH, WIDTH).to(gpuperf.device, torch.float16)
    x = torch.randn(1024, WIDTH, device=gpuperf.device, dtype=torch.float16, requires_grad=True)

    def step():
        layer.zero_grad(set_to_none=True)
        x.grad = None
        layer(x).sum().backward()

    gpuperf.measure(step, items=1024, unit="samples")
