"""The typed core: draft depth (config, strategies, estimates, simulator), pure Python, imported by name.

The tool (plan, launch), bench/, ci/, engine/ and the tests import it as
``ds4x.core``; the wheel build copies its modules (not this file) into the
patched tree's ``vllm/ds4x/`` with the vllm-common overlay, where the hooks
import them as ``vllm.ds4x``. Its modules import each other relatively only,
so they run the same in both places.
"""
