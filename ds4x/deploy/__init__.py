"""The deployment advisor: plan (the VRAM ledger, the measured curve, the advice), the launch
script reader and writer, lk_moe's Python and doctor."""
