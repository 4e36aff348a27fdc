"""What runs inside an engine's Python (a venv with our vLLM wheel, or the GPU machine's tree), imported
from the checkout root: the tiny reasoning model, the draft-depth policies table, the scheduler harness and
the checks the integration tests run through them (python -m engine.checks MODEL_DIR). Not part of the
ds4x wheel: vLLM, torch and tokenizers are the engine's, never the build tool's."""
