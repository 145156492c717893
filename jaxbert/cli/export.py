"""`jaxbert export WORKDIR DST`: a Hugging Face directory from a training run.

A fine-tuning workdir needs no export: its best evaluation's model already is a Hugging Face
directory with its tokenizer (WORKDIR/best); export says so instead of failing on a tokenizer.
"""

from __future__ import annotations

from jaxbert import workdir as workdir_lib
from jaxbert.convert.export import export_workdir, load_instructions
from jaxbert.errors import InputError
from jaxbert.train import rtd_export  # a replaced-token-detection run: its discriminator and generator


def add_arguments(parser) -> None:
    parser.add_argument("workdir", help="a training workdir (holds checkpoints/)")
    parser.add_argument("dst", help="output directory for the Hugging Face model")
    parser.add_argument("--step", type=int, default=None, help="checkpoint step (default: newest readable)")
    parser.add_argument("--overwrite", action="store_true",
                        help="replace DST when it is an earlier jaxbert model directory (anything else is refused)")


def check_not_finetuning(workdir) -> None:
    """InputError for a fine-tuning workdir (its recorded kind), pointing at its best/."""
    try:
        what = workdir_lib.kind(workdir)
    except Exception:  # noqa: BLE001 - unreadable: export_workdir reports the workdir itself
        return
    if what != workdir_lib.FINETUNING:
        return
    best = workdir_lib.path(workdir, workdir_lib.BEST)
    if best.is_dir():
        raise InputError(f"{workdir}: a fine-tuning workdir; its best model is already a Hugging Face directory "
                         f"with its tokenizer: {best} (load it as is, or `jaxbert convert {best} DST`)")
    raise InputError(f"{workdir}: a fine-tuning workdir with no {workdir_lib.BEST}/ yet (written at its first "
                     f"evaluation); export is for pretraining workdirs")


def run(args) -> int:
    check_not_finetuning(args.workdir)
    if rtd_export.rtd_recipe_of(args.workdir) is not None:
        path = rtd_export.export_workdir(args.workdir, args.dst, args.step, overwrite=args.overwrite)
        print(f"wrote {path} (discriminator) and {path}/generator (generator)")
        return 0
    path = export_workdir(args.workdir, args.dst, args.step, overwrite=args.overwrite)
    print(f"wrote {path}")
    print(load_instructions(path))
    return 0
