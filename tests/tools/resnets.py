# resnets.py -- the PyTorch modules of ddptrain's named architectures
# (--model resnet20 ... resnet152, src/model/archs.c), with torchvision's
# module names (conv1, bn1, layer1.0.conv1, layer2.0.downsample.0, fc), so
# their state_dict keys are the tensor names ddptrain writes and reads.
# torchvision is not needed (nor installed here): the blocks are written
# out as torchvision writes them (BasicBlock; Bottleneck v1.5, the stride
# on the 3x3 convolution), and the CIFAR ResNets (He et al. 2016, 4.2)
# with the same blocks and projection shortcuts.
#   import resnets; net = resnets.ResNet("resnet18", in_channels=3, classes=10, width=8)
import torch.nn as nn

ARCHS = {  # name: (cifar, bottleneck, blocks per stage)
    "resnet20": (True, False, [3, 3, 3]), "resnet32": (True, False, [5, 5, 5]),
    "resnet44": (True, False, [7, 7, 7]), "resnet56": (True, False, [9, 9, 9]),
    "resnet110": (True, False, [18, 18, 18]), "resnet18": (False, False, [2, 2, 2, 2]),
    "resnet34": (False, False, [3, 4, 6, 3]), "resnet50": (False, True, [3, 4, 6, 3]),
    "resnet101": (False, True, [3, 4, 23, 3]), "resnet152": (False, True, [3, 8, 36, 3]),
}


def _downsample(inp, out, stride):
    if stride == 1 and inp == out:
        return None
    return nn.Sequential(nn.Conv2d(inp, out, 1, stride, bias=False), nn.BatchNorm2d(out))


class BasicBlock(nn.Module):
    expansion = 1

    def __init__(self, inp, planes, stride):
        super().__init__()
        self.conv1 = nn.Conv2d(inp, planes, 3, stride, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(planes)
        self.relu = nn.ReLU()
        self.conv2 = nn.Conv2d(planes, planes, 3, 1, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(planes)
        self.downsample = _downsample(inp, planes, stride)

    def forward(self, x):
        out = self.bn2(self.conv2(self.relu(self.bn1(self.conv1(x)))))
        return self.relu(out + (self.downsample(x) if self.downsample is not None else x))


class Bottleneck(nn.Module):
    expansion = 4

    def __init__(self, inp, planes, stride):
        super().__init__()
        self.conv1 = nn.Conv2d(inp, planes, 1, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(planes)
        self.conv2 = nn.Conv2d(planes, planes, 3, stride, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(planes)
        self.conv3 = nn.Conv2d(planes, 4 * planes, 1, 1, bias=False)
        self.bn3 = nn.BatchNorm2d(4 * planes)
        self.relu = nn.ReLU()
        self.downsample = _downsample(inp, 4 * planes, stride)

    def forward(self, x):
        out = self.relu(self.bn1(self.conv1(x)))
        out = self.relu(self.bn2(self.conv2(out)))
        out = self.bn3(self.conv3(out))
        return self.relu(out + (self.downsample(x) if self.downsample is not None else x))


class ResNet(nn.Module):
    def __init__(self, arch, in_channels, classes, width=None):
        super().__init__()
        cifar, bottleneck, blocks = ARCHS[arch]
        width = width or (16 if cifar else 64)
        block = Bottleneck if bottleneck else BasicBlock
        if cifar:
            self.conv1 = nn.Conv2d(in_channels, width, 3, 1, 1, bias=False)
        else:
            self.conv1 = nn.Conv2d(in_channels, width, 7, 2, 3, bias=False)
        self.bn1 = nn.BatchNorm2d(width)
        self.relu = nn.ReLU()
        self.maxpool = nn.Identity() if cifar else nn.MaxPool2d(3, 2, 1)
        inp = width
        for s, n in enumerate(blocks):
            layers = []
            for b in range(n):
                layers.append(block(inp, width << s, 2 if s > 0 and b == 0 else 1))
                inp = (width << s) * block.expansion
            setattr(self, "layer%d" % (s + 1), nn.Sequential(*layers))
        self.nstages = len(blocks)
        self.avgpool = nn.AdaptiveAvgPool2d(1)
        self.fc = nn.Linear(inp, classes)

    def forward(self, x):
        x = self.maxpool(self.relu(self.bn1(self.conv1(x))))
        for s in range(self.nstages):
            x = getattr(self, "layer%d" % (s + 1))(x)
        return self.fc(self.avgpool(x).flatten(1))
