"""The Llama decoder layer example (examples/python/llama_layer.py): written with tensorref's
ops, under Flow at a budget below the layer's weights, equal to transformers' LlamaDecoderLayer
within 1e-5, its device bytes never above the budget (the example asserts both)."""
import importlib.util
import pathlib

import pytest

pytest.importorskip("transformers")

EXAMPLE = pathlib.Path(__file__).resolve().parents[3] / "examples/python/llama_layer.py"


def test_the_llama_layer_example_equals_transformers_under_flow():
    spec = importlib.util.spec_from_file_location("llama_layer", EXAMPLE)
    example = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(example)
    assert example.main() <= 1e-5
