"""`harness blocks ...`: capacity planner, waste calculator, simulator and live cross-check."""

from __future__ import annotations

import argparse
import json
import sys

from harness.blocks import limits as L
from harness.blocks.limits import int_in
from harness.engines import DEFAULT_KIND, kinds
from harness.errors import UsageError

__all__ = ["register"]


def _emit(obj) -> None:
    print(json.dumps(obj, indent=2, sort_keys=False))


def _capacity(args) -> int:
    from harness.blocks import capacity as c

    shape = c.load_shape(args.model)
    cap = c.plan(
        shape,
        c.parse_bytes(args.kv_bytes),
        args.block_size,
        dtype=args.dtype,
        kv_cache_dtype=args.kv_cache_dtype,
        tensor_parallel_size=args.tensor_parallel_size,
        num_gpu_blocks_override=args.num_gpu_blocks_override,
    )
    out = cap.to_dict()
    lengths = list(args.length or [])
    if args.max_model_len:
        lengths.append(args.max_model_len)
    if lengths:
        out["max_concurrency"] = c.max_concurrency(cap, lengths)
    _emit(out)
    return 0


def _waste(args) -> int:
    from harness.blocks import waste as w

    try:
        rep = w.waste_report(
            args.min, args.max, args.block_size, args.reserve or [], sample_size=args.sample, seed=args.seed
        )
    except ValueError as exc:
        raise UsageError(str(exc)) from None
    if args.json:
        _emit(rep.to_dict())
    else:
        print(w.render(rep))
    return 0


def _simulate(args) -> int:
    from harness.blocks import scenario, simulate

    sc, specs = scenario.load_any(args.scenario)
    overrides = {
        k: v
        for k, v in (
            ("num_blocks", args.num_blocks),
            ("block_size", args.block_size),
            ("max_num_seqs", args.max_num_seqs),
            ("max_num_batched_tokens", args.max_num_batched_tokens),
        )
        if v
    }
    result = simulate.run(sc, specs=specs, **overrides)
    _emit(result.summary(timeline=args.timeline))
    return 0


def _crosscheck(args) -> int:
    from harness.blocks import live
    from harness.net import loopback_url

    loopback_url(args.url, what="--url")  # the one loopback rule first, as for every check
    why = live.does_not_apply(args.engine, args.check or None)
    if why:  # one line, exit 2: nothing was sent, there is nothing to compare on this engine
        print(f"harness: blocks crosscheck {why}", file=sys.stderr)
        return 2
    verdicts = live.crosscheck(
        args.url,
        args.model,
        served_name=args.served_name,
        dtype=args.dtype,
        kv_bytes=args.kv_bytes,
        checks=args.check or None,
        engine=args.engine,
    )
    _emit([v.to_dict() for v in verdicts])
    ran = [v for v in verdicts if v.agree is not None]
    if not ran:  # no observation is not a pass
        print("harness: no check could be run (see each explanation)", file=sys.stderr)
        return 1
    return 0 if all(v.agree for v in ran) else 1


class _OneLineParser(argparse.ArgumentParser):
    """A bad flag value is one line on stderr naming the flag, exit 2, like every other harness error."""

    def error(self, message: str):
        self.exit(2, f"harness: error: {self.prog.removeprefix('harness ')}: {message} (see --help)\n")

    def _get_values(self, action, arg_strings):
        # Python 3.11 drops a lone "--" given as an option's value (`--min=--`) and hands back [] unconverted
        if action.nargs is None and action.option_strings and arg_strings == ["--"]:
            self.error(f"argument {'/'.join(action.option_strings)}: expected one argument")
        return super()._get_values(action, arg_strings)


def register(sub) -> None:
    p = sub.add_parser("blocks", help="PagedAttention block math: capacity, waste, simulation, live check")
    bsub = p.add_subparsers(dest="blocks_command", metavar="SUBCOMMAND", parser_class=_OneLineParser)
    p.set_defaults(func=lambda args: (p.print_help(), 2)[1])

    c = bsub.add_parser("capacity", help="KV blocks/tokens for a model config (vLLM 0.11.0 formula)")
    c.add_argument("--model", required=True, help="model directory (or its config.json)")
    c.add_argument("--kv-bytes", required=True, help="KV memory: bytes or 1GiB / 512MiB")
    c.add_argument("--block-size", type=int_in(1, L.MAX_BLOCK_SIZE), required=True)
    c.add_argument("--dtype", default="auto", help="engine --dtype (auto: float32 checkpoints -> bfloat16 on CPU)")
    c.add_argument("--kv-cache-dtype", default="auto", help="auto (= model dtype) or fp8")
    c.add_argument("--tensor-parallel-size", type=int_in(1, L.MAX_TP), default=1)
    c.add_argument("--num-gpu-blocks-override", type=int_in(1, L.MAX_BLOCKS))
    c.add_argument("--max-model-len", type=int_in(1, L.MAX_LENGTH), help="adds max concurrency at this length")
    c.add_argument("--length", type=int_in(1, L.MAX_LENGTH), action="append", help="request length (repeatable)")
    c.set_defaults(func=_capacity)

    w = bsub.add_parser("waste", help="rounding waste and utilisation for uniform lengths min..max")
    w.add_argument("--min", type=int_in(1, L.MAX_WASTE_LENGTH), required=True)
    w.add_argument(
        "--max",
        type=int_in(1, L.MAX_WASTE_LENGTH),
        required=True,
        help=f"longest length (at most {L.MAX_WASTE_LENGTH}: every length min..max is enumerated)",
    )
    w.add_argument("--block-size", type=int_in(1, L.MAX_BLOCK_SIZE), required=True)
    w.add_argument("--reserve", type=int_in(1, L.MAX_LENGTH), action="append", help="max-length reservation to compare")
    w.add_argument(
        "--sample",
        type=int_in(0, L.MAX_SAMPLE),
        default=0,
        help=f"random sample size for the sample aggregate (0: exhaustive; at most {L.MAX_SAMPLE})",
    )
    w.add_argument("--seed", type=int_in(0, L.MAX_SEED), default=0)
    w.add_argument("--json", action="store_true")
    w.set_defaults(func=_waste)

    s = bsub.add_parser(
        "simulate",
        help="replay a scenario (loadtests/*.yaml, or the simulator's own format with an "
        "engine section) through a continuous-batching scheduler",
    )
    s.add_argument("scenario")
    s.add_argument("--num-blocks", type=int_in(2, L.MAX_SIM_BLOCKS), help="override the scenario's engine.num_blocks")
    s.add_argument("--block-size", type=int_in(1, L.MAX_BLOCK_SIZE))
    s.add_argument("--max-num-seqs", type=int_in(1, L.MAX_REQUESTS))
    s.add_argument("--max-num-batched-tokens", type=int_in(1, L.MAX_SIM_TOKENS))
    s.add_argument("--timeline", action="store_true", help="include the per-step timeline")
    s.set_defaults(func=_simulate)

    x = bsub.add_parser(
        "crosscheck",
        help="compare predictions with a running engine (127.0.0.1 only)",
        description="Compare the block model's predictions with a running engine's /metrics, read with its engine "
        "profile's series (harness/engines/). Exit codes: 0 every check that ran agrees; 1 a check disagrees or none "
        "could run; 2 bad input, or the checks do not apply to --engine (its profile exports no block configuration "
        "or KV usage gauge: one line says why, nothing is sent).",
    )
    x.add_argument("--url", required=True, help="base URL, e.g. http://127.0.0.1:8000")
    x.add_argument(
        "--engine",
        choices=kinds(),
        default=DEFAULT_KIND,
        help="the engine kind behind --url, whose profile names the series (default: %(default)s)",
    )
    x.add_argument("--model", required=True, help="the engine's model directory")
    x.add_argument("--served-name", help="served model name (default: first of /v1/models)")
    x.add_argument("--dtype", default="auto", help="the --dtype the engine was started with")
    x.add_argument("--kv-bytes", help="KV bytes (default: cpu_kvcache_space_bytes from /metrics)")
    x.add_argument(
        "--check",
        action="append",
        choices=["num_blocks", "usage", "prefix_hits", "preemptions"],  # live.CHECKS (the CLI imports it lazily)
        help="subset (repeatable)",
    )
    x.set_defaults(func=_crosscheck)
