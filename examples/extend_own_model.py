"""Context extension on your own text: the `posenc extend` experiment through the Python API.

    python examples/extend_own_model.py path/to/text_or_folder
    python examples/extend_own_model.py notes.txt --methods linear,yarn --finetune-steps 50
    python examples/extend_own_model.py notes.txt --model runs/extend_own/base.pt   # no training

Trains a small character-level RoPE model at --train-len on the text (or loads a posenc
checkpoint: a `base.pt` of `posenc extend`, or the `model-rope.pt` of `posenc extrapolate`),
then runs it at every --eval-lens with each RoPE scaling method (position interpolation, NTK,
dynamic NTK, YaRN, Llama 3, LongRoPE), zero-shot and after --finetune-steps steps at the
longest length. Prints the table and writes results.json, results.csv, extend.png, report.md
and base.pt to --out; run it again with --resume to add methods without training the base
model again (the finished ones are kept). To score the same base model at other lengths, load
it into another folder: --model runs/extend_own/base.pt --out runs/extend_longer.
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from pathlib import Path

from posenc.app.study import METHODS, ConfigError, Corpus, ExtendConfig, run_extend


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("corpus", help="a UTF-8 text file or a folder of them")
    parser.add_argument("--model", help="a posenc checkpoint to extend instead of training one")
    parser.add_argument(
        "--methods", default=",".join(METHODS), help="comma-separated, from " + ",".join(METHODS)
    )
    parser.add_argument("--train-len", type=int, default=64)
    parser.add_argument("--eval-lens", default="64,128,256,512", help="comma-separated lengths")
    parser.add_argument("--steps", type=int, default=1000, help="training steps of the base model")
    parser.add_argument("--finetune-steps", type=int, default=100, help="0: zero-shot only")
    parser.add_argument("--d-model", type=int, default=64)
    parser.add_argument("--eval-chars", type=int, default=16384, help="text scored at every length")
    parser.add_argument("--out", default="runs/extend_own")
    parser.add_argument(
        "--resume",
        action="store_true",
        help="continue in --out: reuse its base.pt and finished methods (same settings)",
    )
    args = parser.parse_args(argv)

    try:
        config = ExtendConfig(
            train_len=args.train_len,
            eval_lens=tuple(int(n) for n in args.eval_lens.split(",")),
            steps=args.steps,
            finetune_steps=args.finetune_steps,
            d_model=args.d_model,
            eval_chars=args.eval_chars,
            methods=tuple(args.methods.split(",")),
        )
        result = run_extend(
            Corpus.from_path(args.corpus),
            config,
            out_dir=args.out,  # base.pt is saved here as soon as it is trained
            resume=args.resume,
            model_path=args.model,
            # Searched LongRoPE factors (or any scaling dict) replace a method's default:
            # scalings={"longrope": {"rope_type": "longrope", "factor": 8.0, "short_factor": [...], ...}},
            progress=False,
            log=print,
        )
    except ConfigError as err:  # a bad setting, a corpus too short for the longest length, ...
        parser.error(str(err))

    print(result.table())
    longest = config.eval_lens[-1]
    for method in ("linear", "yarn"):  # single numbers, as a note would quote them
        if method in config.methods:
            print(f"{method} at {longest}, zero-shot: {result.perplexity(method, longest):.3f}")
    paths = result.save(args.out)  # results.json (tidy rows under "results") and results.csv
    figure = None
    try:
        from posenc.app.plots import plot_extend

        paths["png"] = figure = plot_extend(result, Path(args.out) / "extend.png")
    except ImportError:  # matplotlib is in the `cli` extra
        print("matplotlib is not installed: the figure is skipped")
    report = Path(args.out) / "report.md"
    report.write_text(result.report(figure.name if figure else None), encoding="utf-8")
    print("wrote", *paths.values(), report)


if __name__ == "__main__":
    main()
