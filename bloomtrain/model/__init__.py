"""The BLOOM model: config presets, ALiBi, and the tensor-parallel modules."""

from bloomtrain.model.bloom import BloomBlock, BloomEmbedding, BloomModel, LayerNorm
from bloomtrain.model.config import ModelConfig

__all__ = ["BloomBlock", "BloomEmbedding", "BloomModel", "LayerNorm", "ModelConfig"]
