"""Start llama-cpp-python's OpenAI-compatible server for bench/llm_judge_real.py (not a ragtrace dependency).

Run it with the interpreter of a venv that has `llama-cpp-python[server]`; every argument is the
server's own (`python -m llama_cpp.server --help`):

    /path/to/venv/bin/python bench/serve_llama_cpp.py --model MODEL.gguf --model_alias judge \\
        --n_ctx 8192 --n_threads 1 --host 127.0.0.1 --port 8080

One change to the server: model weights are loaded without ggml's "extra buffer types" (weight
repacking). A native build on a CPU with AMX includes ggml's AMX code path, and the first completion
then crashes the server (SIGSEGV at `ldtilecfg`); `Llama` has no option for it, so the default model
parameters are wrapped before the server loads the model.
"""

from __future__ import annotations

from typing import Any

import llama_cpp.llama_cpp as native  # type: ignore[import-not-found]

_default_params = native.llama_model_default_params


def _params_without_extra_buffers() -> Any:
    params = _default_params()
    params.use_extra_bufts = False
    return params


native.llama_model_default_params = _params_without_extra_buffers

from llama_cpp.server.__main__ import main  # type: ignore[import-not-found]  # noqa: E402

if __name__ == "__main__":
    main()
