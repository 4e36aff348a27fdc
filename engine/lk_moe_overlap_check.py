"""The premises of two micro-batches (#20 item 2, docs/overlap-design.md §2(a) and §4 step 1),
on lk_moe and torch alone: one CUDA graph captured from two Python threads that hand a baton
back and forth (what vLLM's UBatchContext does), every lk_moe `cpu_decode` on ONE side stream
joined by events, each micro-batch writing its own rows of one fp32 output buffer, while the
main stream runs the other micro-batch's GPU part (a timed `torch.cuda._sleep`, as long as one
cpu_decode call, then the layer's residual add). Prints one JSON line per query length:
outputs of the serial graph and of the overlapped graph against an eager serial run (bitwise),
and replay ms of both against the CPU and GPU parts. Runs under the Python that has lk_moe;
imports nothing of ds4x or vLLM. From the checkout root: python -m engine.lk_moe_overlap_check"""

import json
import os
import threading
import time
from collections.abc import Callable
from typing import Any

os.environ.setdefault("LK_THREADS", "8")  # before lk_moe makes its pool
import lk_moe
import torch

from engine.lk_moe_check import config, layer

E, H, I, TOP_K, LAYERS = 16, 1024, 512, 6, 6
DEV = torch.device("cuda")


class Baton:
    """Two threads take turns queueing work: one runs while the other waits."""

    def __init__(self) -> None:
        self.turn = [threading.Event(), threading.Event()]
        self.finished = [False, False]

    def pass_to(self, me: int) -> None:
        self.turn[me].clear()
        self.turn[1 - me].set()
        if not self.finished[1 - me]:  # a thread that ended (or failed) never hands it back
            self.turn[me].wait()

    def finish(self, me: int) -> None:
        self.finished[me] = True
        self.turn[1 - me].set()


class Model:
    """LAYERS lk_moe layers and persistent buffers for two micro-batches of q tokens each."""

    def __init__(self, q: int) -> None:
        self.q = q
        self.moes: list[Any] = []
        self.keep: list[Any] = []
        for i in range(LAYERS):
            w13, w2 = layer(E, H, I, seed=10 + i)
            self.keep.append((w13, w2))  # lk_moe reads the host weights by pointer
            self.moes.append(lk_moe.MOE_BF16(config(E, TOP_K, H, I, 64), w13.ctypes.data, w2.ctypes.data, 0, 0, 0, 0))
        g = torch.Generator().manual_seed(q)
        self.ids = [torch.stack([torch.randperm(E, generator=g)[:TOP_K] for _ in range(2 * q)]).int().to(DEV)
                    for _ in range(LAYERS)]
        self.w = [torch.softmax(torch.rand(2 * q, TOP_K, generator=g), 1).to(DEV) for _ in range(LAYERS)]
        self.h0 = torch.randn(2 * q, H, generator=g).bfloat16().to(DEV)
        self.h = torch.empty_like(self.h0)  # the layer input, then output, of both micro-batches
        self.xin = torch.empty_like(self.h0)  # cpu_decode's input (it reads it by pointer)
        self.out = torch.zeros(2 * q, H, dtype=torch.float32, device=DEV)  # cpu_decode's output, rows per micro-batch
        self.tmp = torch.empty_like(self.h0)
        self.cycles = 0

    def rows(self, t: torch.Tensor, ub: int) -> torch.Tensor:
        return t[ub * self.q:(ub + 1) * self.q]

    def cpu(self, layer_: int, ub: int, stream: torch.cuda.Stream) -> None:
        r = slice(ub * self.q, (ub + 1) * self.q)
        self.moes[layer_].cpu_decode(stream.cuda_stream, self.q, TOP_K, self.xin[r].data_ptr(),
                                     self.ids[layer_][r].data_ptr(), self.w[layer_][r].data_ptr(),
                                     self.out[r].data_ptr())

    def gpu_head(self, ub: int) -> None:
        """The micro-batch's GPU part of a layer before its routed experts (attention, router)."""
        torch.cuda._sleep(self.cycles)
        self.rows(self.xin, ub).copy_(self.rows(self.h, ub))

    def gpu_tail(self, ub: int) -> None:
        """After the routed experts: their output into the residual stream (in place: no allocation)."""
        self.rows(self.tmp, ub).copy_(self.rows(self.out, ub))
        self.rows(self.h, ub).add_(self.rows(self.tmp, ub)).mul_(0.5)


def serial(m: Model) -> None:
    """Today's order on one stream: each micro-batch's layer waits for its own cpu_decode."""
    m.h.copy_(m.h0)
    stream = torch.cuda.current_stream()
    for layer_ in range(LAYERS):
        for ub in (0, 1):
            m.gpu_head(ub)
            m.cpu(layer_, ub, stream)
            m.gpu_tail(ub)


def overlapped(m: Model, compute: torch.cuda.Stream, side: torch.cuda.Stream) -> None:
    """Two threads, one baton; all cpu_decode calls on `side`, in the order A_L, B_L, A_L+1..."""
    m.h.copy_(m.h0)
    baton = Baton()
    errors: list[BaseException] = []

    def run(ub: int) -> None:
        try:
            torch.cuda.set_stream(compute)
            baton.turn[ub].wait()
            done: torch.cuda.Event | None = None
            for layer_ in range(LAYERS):
                if done is not None:
                    compute.wait_event(done)
                    m.gpu_tail(ub)
                m.gpu_head(ub)
                routed = torch.cuda.Event()
                routed.record(compute)
                side.wait_event(routed)
                m.cpu(layer_, ub, side)
                done = torch.cuda.Event()
                done.record(side)
                baton.pass_to(ub)
            assert done is not None
            compute.wait_event(done)
            m.gpu_tail(ub)
        except BaseException as e:  # reported by the caller
            errors.append(e)
        finally:
            baton.finish(ub)

    threads = [threading.Thread(target=run, args=(ub,)) for ub in (0, 1)]
    for t in threads:
        t.start()
    baton.turn[0].set()
    for t in threads:
        t.join()
    if errors:
        raise errors[0]


def timed(fn: Callable[[], object], n: int = 20) -> float:
    fn()
    torch.cuda.synchronize()
    start = time.perf_counter()
    for _ in range(n):
        fn()
    torch.cuda.synchronize()
    return (time.perf_counter() - start) / n * 1000


def calibrate(m: Model) -> float:
    """One cpu_decode call's ms; the sleep in gpu_head is set to last as long."""
    call_ms = timed(lambda: m.cpu(0, 0, torch.cuda.current_stream()), 50)
    sleep_ms = timed(lambda: torch.cuda._sleep(1_000_000), 20)
    m.cycles = int(1_000_000 * call_ms / sleep_ms)
    return call_ms


def case(q: int) -> dict[str, Any]:
    m = Model(q)
    call_ms = calibrate(m)
    serial(m)
    torch.cuda.synchronize()
    want = m.h.clone()
    compute, side = torch.cuda.Stream(), torch.cuda.Stream()
    graphs: dict[str, Any] = {}
    bodies: list[tuple[str, Callable[[], None]]] = [
        ("serial", lambda: serial(m)), ("overlapped", lambda: overlapped(m, compute, side))]
    for name, body in bodies:
        with torch.cuda.stream(compute):
            body()  # warm-up, eager
        torch.cuda.synchronize()
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph, stream=compute):
            body()
        graphs[name] = graph
    out: dict[str, Any] = {"q": q, "layers": LAYERS, "cpu_call_ms": call_ms, "cpu_ms": 2 * LAYERS * call_ms,
           "gpu_sleep_ms": 2 * LAYERS * call_ms}
    for name, graph in graphs.items():
        m.h.zero_()
        graph.replay()
        torch.cuda.synchronize()
        out[f"{name}_equal"] = bool(torch.equal(m.h, want))
        out[f"{name}_ms"] = timed(graph.replay)
    return out


if __name__ == "__main__":
    for q in (1, 3):
        print(json.dumps(case(q)), flush=True)
