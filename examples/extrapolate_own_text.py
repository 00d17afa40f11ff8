"""Train short, test long on your own text: the `posenc extrapolate` study through the Python API.

    python examples/extrapolate_own_text.py path/to/text_or_folder [--steps 300]

Trains one small character-level language model per encoding at length 64 on the text,
prints validation perplexity at lengths 64..512 and writes results.json, results.csv (as each model
finishes), the models (model-*.pt) and extrapolation.png to ./runs/own_text. The folder is checked before
training, as the command checks it: another study there is refused. Any registry spec works in ENCODINGS.
"""

import argparse
from pathlib import Path

from posenc.app.plots import plot_extrapolation
from posenc.app.study import ConfigError, Corpus, run_study

ENCODINGS = ["rope", "alibi", "t5", "sinusoidal", "learned", "none"]

parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
parser.add_argument("corpus", help="a UTF-8 text file or a folder of them")
parser.add_argument("--steps", type=int, default=300)
parser.add_argument("--out", default="runs/own_text")
args = parser.parse_args()

try:
    corpus = Corpus.from_path(args.corpus)
    result = run_study(
        corpus,
        ENCODINGS,
        out_dir=args.out,  # results.json and results.csv, rewritten as each model finishes
        train_len=64,
        eval_lens=[64, 128, 256, 512],
        steps=args.steps,
        log=print,
    )
except ConfigError as err:  # a missing or empty corpus, a corpus too short for length 512, ...
    parser.error(str(err))
print(result.table())
png = plot_extrapolation(result, Path(args.out) / "extrapolation.png")  # the figure
print("wrote", Path(args.out) / "results.json", Path(args.out) / "results.csv", png, "and the models")
