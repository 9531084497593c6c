"""The proxy models, by command name (``python -m proxies.<name>``)."""

from .alexnet import AlexNetRing
from .base import Arg, Model
from .cosmoflow import CosmoFlow
from .dlrm import DLRM
from .gpt3 import GPT3, GPT3MoE, GPT3MoEOnePipeStep, GPT3OnePipeStep
from .pipeline_dp import BERT, GPT2
from .resnet import ResNet50, ResNet152, ResNet152Strong

MODELS: dict[str, Model] = {
    m.name: m
    for m in (
        GPT2(),
        BERT(),
        ResNet50(),
        ResNet152(),
        ResNet152Strong(),
        CosmoFlow(),
        DLRM(),
        GPT3(),
        GPT3OnePipeStep(),
        GPT3MoE(),
        GPT3MoEOnePipeStep(),
        AlexNetRing(),
    )
}


def get_model(name: str) -> Model:
    try:
        return MODELS[name]
    except KeyError:
        raise KeyError(f"unknown model {name!r}; known: {', '.join(MODELS)}") from None


__all__ = ["MODELS", "Arg", "Model", "get_model"]
