"""The ``posenc`` command line: every command, its options and its help, in one parser."""

from __future__ import annotations

from posenc import __version__

from ._common import (
    _add_study_options,
    _bounded,
    _name_list,
    _non_negative_int,
    _Parser,
    _positive_float,
)

#: The most positions ``posenc plot`` draws (a picture shows no more; tables stay small).
MAX_PLOT_LENGTH = 8192


def _build_parser() -> _Parser:
    from ..study.config import StudyConfig  # no torch: see posenc.app.study.config

    defaults = StudyConfig.__dataclass_fields__
    parser = _Parser(
        prog="posenc",
        description="Position encodings for attention models: an extrapolation study, plots and the registry.",
    )
    parser.add_argument("--version", action="version", version=f"posenc {__version__}")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)
    commands.required = True

    ex = commands.add_parser(
        "extrapolate",
        help="train short, test long: perplexity of a small char-level LM per encoding at several lengths",
        description=(
            "Train one small causal character-level TransformerLM per position encoding at --train-len, then "
            "measure validation perplexity at each --eval-lens (Press et al., 'Train Short, Test Long'). Prints "
            "a table and writes results.json, results.csv, extrapolation.png and each model (model-NAME.pt) to "
            "--out; results are saved as each model finishes, and --resume continues an interrupted run."
        ),
    )
    ex.add_argument(
        "--encodings",
        metavar="SPECS",
        help='registry specs separated by commas, e.g. "rope(base=500000.0),alibi,learned"; a comma inside '
        "parentheses, brackets, braces or quotes does not split (default: every registered encoding that can "
        "run past its training length, plus the learned table as the one that cannot)",
    )
    ex.add_argument(
        "--corpus",
        metavar="PATH",
        help="a UTF-8 text file or a folder of them (default: the running Python's standard library sources)",
    )
    ex.add_argument(
        "--out",
        default="posenc-extrapolation",
        metavar="DIR",
        help="folder for results.json, results.csv, extrapolation.png and each model's checkpoint "
        "(model-NAME.pt), written as each model finishes (default %(default)s)",
    )
    _add_study_options(ex, defaults)
    ex.add_argument(
        "--resume",
        action="store_true",
        help="reuse the encodings already in --out/results.json (same settings and corpus) instead of training "
        "them; those not named in --encodings now are kept in the results",
    )
    ex.add_argument(
        "--force",
        action="store_true",
        help="replace the study already in --out, first removing its results, figures, report and checkpoints "
        "(else a run there is refused)",
    )
    ex.add_argument("--quiet", action="store_true", help="no progress bars")

    from ..study.config import METHODS, ExtendConfig

    ext_defaults = ExtendConfig.__dataclass_fields__
    en = commands.add_parser(
        "extend",
        help="context extension: a RoPE model trained short, each scaling method (PI, NTK, YaRN, ...) run long",
        description=(
            "Train one small causal character-level RoPE TransformerLM at --train-len (or load it with --model or "
            "--resume), then score each RoPE scaling method at every --eval-lens zero-shot and after "
            "--finetune-steps steps at the longest length. Same weights, seed, batches and fine-tuning budget for "
            "every method: only the scaling dict differs. Writes results.json, results.csv, extend.png, "
            "report.md and the base model (base.pt) to --out."
        ),
    )
    en.add_argument(
        "--methods",
        type=_name_list,
        default=",".join(METHODS),
        metavar="M,M,...",
        help=f"methods among {','.join(METHODS)} (default: all)",
    )
    en.add_argument(
        "--factor",
        type=_positive_float,
        default=None,
        metavar="X",
        help="extension factor of every method (default: longest --eval-lens / --train-len)",
    )
    en.add_argument(
        "--finetune-steps",
        type=_non_negative_int,
        default=ext_defaults["finetune_steps"].default,
        metavar="N",
        help="fine-tuning steps per method at the longest length; 0 skips fine-tuning (default %(default)s)",
    )
    en.add_argument(
        "--finetune-lr",
        type=_positive_float,
        default=None,
        metavar="X",
        help="peak fine-tuning learning rate (default: --lr / 3)",
    )
    en.add_argument(
        "--baselines",
        metavar="SPECS",
        help='encodings trained from scratch as reference rows, e.g. "alibi,none" (default: none)',
    )
    en.add_argument(
        "--corpus", metavar="PATH", help="a UTF-8 text file or folder (default: the standard library)"
    )
    en.add_argument(
        "--out",
        default="posenc-extend",
        metavar="DIR",
        help="folder for the results, the figure, report.md and base.pt (default %(default)s)",
    )
    en.add_argument(
        "--model", metavar="PATH", help="load this posenc checkpoint (a base.pt) instead of training"
    )
    en.add_argument(
        "--resume",
        action="store_true",
        help="continue the run in --out: reuse its base model, baselines and finished methods (same settings "
        "and corpus, else refused); methods and baselines not named now are kept in the results",
    )
    en.add_argument(
        "--force",
        action="store_true",
        help="replace the study already in --out, first removing its results, figures, report and checkpoints "
        "(else a run there is refused)",
    )
    _add_study_options(en, ext_defaults)
    en.add_argument("--quiet", action="store_true", help="no progress bars")

    pl = commands.add_parser(
        "plot",
        help="draw one encoding: tables, similarity, q·k decay or bias matrices",
        description="Draw a picture of one encoding, chosen by where it acts: the added table and the similarity "
        "of positions (sinusoidal, learned, 2D), cos(position·θ) and the decay of q·k (RoPE), or the bias "
        "matrix of every head (ALiBi, T5).",
    )
    pl.add_argument(
        "name", metavar="NAME", help='a registered name or spec, e.g. rope or "alibi(max_bias=4.0)"'
    )
    pl.add_argument(
        "--out", metavar="FILE", help="PNG file to write (default: NAME.png in the current folder)"
    )
    pl.add_argument(
        "--force", action="store_true", help="replace the file at --out (else a run there is refused)"
    )
    pl.add_argument(
        "--length",
        type=_bounded(MAX_PLOT_LENGTH),
        default=128,
        metavar="N",
        help=f"positions shown (default %(default)s, at most {MAX_PLOT_LENGTH})",
    )
    pl.add_argument(
        "--d-model", type=_bounded(8192), default=128, metavar="N", help="model width (default %(default)s)"
    )
    pl.add_argument(
        "--num-heads", type=_bounded(256), default=8, metavar="N", help="heads (default %(default)s)"
    )

    commands.add_parser("list", help="the registered encodings", description="List the registered encodings.")

    de = commands.add_parser(
        "describe",
        help="one encoding's options, defaults and accepted values",
        description="Show an encoding's options with their defaults and accepted values, read from the registry.",
    )
    de.add_argument("name", metavar="NAME", help="a registered name or alias")
    de.add_argument("--json", action="store_true", help="print the description as JSON")

    mo = commands.add_parser(
        "models",
        help="each model type of the installed transformers: matched by posenc, refused (and why), or not built",
        description="For every model type of the installed transformers whose text model rotates with a "
        "*RotaryEmbedding: build it tiny, rotate with the model's own code and with posenc's encoding of each "
        "layer type (from the config object and its config.json dict), and say whether posenc matches it (by "
        "its table of model types or by rule from the standardized fields), refuses it (with the reason) or "
        "could not build it here. The table of docs/hf_coverage.md; exit status 1 if any model type mismatches. "
        "Needs transformers; the whole zoo takes a few minutes.",
    )
    mo.add_argument(
        "--types",
        type=_name_list,
        metavar="T,T,...",
        help="only these model types, e.g. llama,qwen2_vl (default: every model type of transformers)",
    )
    mo.add_argument(
        "--all",
        action="store_true",
        help="also list the model types without a text rotary embedding, with what from_hf_config makes of "
        "their tiny config (not checked against their code)",
    )
    form = mo.add_mutually_exclusive_group()
    form.add_argument("--markdown", action="store_true", help="print the Markdown page (docs/hf_coverage.md)")
    form.add_argument("--json", action="store_true", help="print the outcomes as JSON")
    return parser
