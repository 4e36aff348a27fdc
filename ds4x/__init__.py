"""ds4x: a patch series over vLLM, Lvllmds4-x and FlashInfer, built into wheels."""

__version__ = "0.1.0"
