"""The valuelens benchmark suite: ``python -m bench --model smollm2-135m --texts 96``.

Modules: :mod:`bench.suite` (the rows, their ratios and targets), :mod:`bench.memory_7b` (peak RSS
of a Llama-2-7B-shaped model on CPU), :mod:`bench.dtype` (bf16 against fp32 on CPU),
:mod:`bench.shapes` (randomly initialised models of real shapes), :mod:`bench.texts` (the length
mix), :mod:`bench.measure` (timing and peak memory). ``bench/gpu_check.sh`` runs the CUDA side.
The package imports only the valuelens core and the host frameworks (transformers,
sentence-transformers, LangChain, LlamaIndex — the last three only where a row needs them).
"""
