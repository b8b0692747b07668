"""Annotated real model code for the fuzzer: HF transformers and timm models, each block in a region.

The generated programs (fuzz_generator.py) are small and made up; these are third-party model code that
nobody here wrote, built from tiny configs with random weights (nothing is downloaded), with every
attention block inside ``fx.traceback.annotate`` and every MLP inside an ``annotate_fn``-decorated call,
the way torchtitan marks its blocks. A program is named ``<model>/<capture>``, e.g.
``hf_llama_sdpa/compile``, and is a ``Program`` like a seed's: its source defines ``Net``, whose forward
maps the fuzzer's (4, 8) input to a scalar loss (token ids or an image are derived from it), so the
fuzzer's observer, capture paths and comparison run it unchanged.

timm imports torchvision, which has no build for the CPU-only torch of the 2.13 oracle; the timm programs
are compared against a pristine release that is itself upstream (2.13 and later), see ``needs_torchvision``.
"""
from __future__ import annotations

from fuzz_generator import Program, generate

_REGION = '''
import torch
import torch.fx.traceback as fx_traceback
from torch import nn


class Region(nn.Module):
    """Runs the block it wraps inside annotate(meta), as a model author marks an attention block."""

    def __init__(self, block, meta):
        super().__init__()
        self.block = block
        self.meta = meta

    def forward(self, *args, **kwargs):
        with fx_traceback.annotate(self.meta):
            return self.block(*args, **kwargs)


def region_fn(meta):
    """The call of a block as an annotate_fn-decorated function, as torchtitan marks its MLPs."""

    @fx_traceback.annotate_fn(meta)
    def call(block, *args, **kwargs):
        return block(*args, **kwargs)

    return call


class FnRegion(nn.Module):
    def __init__(self, block, meta):
        super().__init__()
        self.block = block
        self.call = region_fn(meta)

    def forward(self, *args, **kwargs):
        return self.call(self.block, *args, **kwargs)
'''

_HF = _REGION + '''
import transformers


def build():
    torch.manual_seed(0)
    if FAMILY == "llama":
        config = transformers.LlamaConfig(
            vocab_size=64, hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
            num_key_value_heads=2, max_position_embeddings=64, attn_implementation=ATTENTION)
        model = transformers.LlamaForCausalLM(config)
        for i, layer in enumerate(model.model.layers):
            layer.self_attn = Region(layer.self_attn, {"layer": i, "part": "attention"})
            layer.mlp = FnRegion(layer.mlp, {"layer": i, "part": "mlp"})
    else:
        config = transformers.GPT2Config(vocab_size=64, n_positions=64, n_embd=32, n_layer=2, n_head=4,
                                         attn_implementation=ATTENTION)
        model = transformers.GPT2LMHeadModel(config)
        for i, block in enumerate(model.transformer.h):
            block.attn = Region(block.attn, {"layer": i, "part": "attention"})
            block.mlp = FnRegion(block.mlp, {"layer": i, "part": "mlp"})
    model.config.use_cache = False
    return model


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.model = build()

    def forward(self, x):
        ids = (x.detach().abs() * 1000).long().remainder(64).reshape(2, 16)
        return self.model(input_ids=ids, labels=ids, use_cache=False).loss
'''

_TIMM = _REGION + '''
def build():
    torch.manual_seed(0)
    if KIND == "vit":
        from timm.models.vision_transformer import VisionTransformer

        model = VisionTransformer(img_size=16, patch_size=8, num_classes=10, embed_dim=32, depth=2, num_heads=2)
        for i, block in enumerate(model.blocks):
            block.attn = Region(block.attn, {"layer": i, "part": "attention"})
            block.mlp = FnRegion(block.mlp, {"layer": i, "part": "mlp"})
        return model
    from timm.models.resnet import BasicBlock, ResNet

    model = ResNet(BasicBlock, [1, 1, 1, 1], num_classes=10)  # BatchNorm buffers, updated in training
    for i, name in enumerate(("layer1", "layer2", "layer3", "layer4")):
        setattr(model, name, Region(getattr(model, name), {"stage": i}))
    return model


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.model = build()

    def forward(self, x):
        image = x.repeat(24, 2).reshape(2, 3, 16, 16)
        return self.model(image).float().pow(2).mean()
'''

# model -> (source template, the settings it reads, capture paths)
MODELS = {
    "hf_llama_eager": (_HF, {"FAMILY": "llama", "ATTENTION": "eager"}, ("compile", "export_strict")),
    "hf_llama_sdpa": (_HF, {"FAMILY": "llama", "ATTENTION": "sdpa"}, ("compile", "aot_module", "export_nonstrict")),
    "hf_gpt2_eager": (_HF, {"FAMILY": "gpt2", "ATTENTION": "eager"}, ("compile", "make_fx")),
    "hf_gpt2_sdpa": (_HF, {"FAMILY": "gpt2", "ATTENTION": "sdpa"}, ("compile", "export_nonstrict")),
    "timm_vit": (_TIMM, {"KIND": "vit"}, ("compile", "export_strict")),
    "timm_resnet": (_TIMM, {"KIND": "resnet"}, ("compile", "export_nonstrict")),
}
MODEL_PROGRAMS = [f"{model}/{capture}" for model, (_, _, captures) in MODELS.items() for capture in captures]


def needs_torchvision(key: str) -> bool:
    return key.startswith("timm_")


def model_program(key: str) -> Program:
    model, capture = key.split("/")
    template, settings, captures = MODELS[model]
    if capture not in captures:
        raise KeyError(f"{key}: {model} runs under {', '.join(captures)}")
    header = "".join(f"{name} = {value!r}\n" for name, value in settings.items())
    return Program(seed=key, capture=capture, source=header + template, features=frozenset({"model", model}))


def program(key) -> Program:
    """A seed's generated program, or a model program by name."""
    text = str(key)
    return generate(int(text)) if text.lstrip("-").isdigit() else model_program(text)
