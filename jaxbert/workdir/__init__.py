"""The training workdir: its layout, its checkpoints, the claim a run makes on it and what a run records there.

The package's public face: every module outside it imports from here (``from jaxbert.workdir import
read_run``). The training loop saves through ``Checkpoints`` and ``write_recipe``; every reader
(from_pretrained and export, fill-mask, parity, fine-tuning, plot) goes through ``read_run``,
``read_params``, ``tokenizer_path`` and ``read_recipe``.

    layout        every name in a workdir (the one module that spells them), paths, the effective recipe
    meta          the JSON a checkpoint records beside its arrays, and its fields read back
    checkpoints   Orbax: saving and restoring a run's state; params and meta read on the host
    claims        a workdir's kind, a run's claim on its folder, placement outside published outputs
    runs          a run read back: config, model class, params, tokenizer; what its newest checkpoint records
"""

from jaxbert.workdir.checkpoints import (READ_ATTEMPTS, Checkpoints, CheckpointWriteError, RecipeMismatch,
                                         newest_meta, read_params)
from jaxbert.workdir.claims import check_placement, claim, claimed, kind
from jaxbert.workdir.layout import (BEST, CHECKPOINTS, CORRUPT, CURVES, DATA, DOWNSTREAM, EVAL, EXPORT, FILL_MASK,
                                    FINETUNING, KIND_FILE, LOCK, META, METRICS, OUTPUTS, PRETRAINING, RECIPE,
                                    STATE, TENSORBOARD, TOKENIZER, WorkdirError, downstream_dir, is_workdir, path,
                                    read_recipe, workdirs_near, write_recipe)
from jaxbert.workdir.meta import (checkpoint_meta, metric_window, saved_recipe, state_tree, task_history,
                                  task_record, with_metric_window)
from jaxbert.workdir.runs import (newest_task_record, read_run, recorded_config, recorded_loader, run_config,
                                  run_tokenizer_dir, tokenizer_path)

__all__ = [
    "BEST", "CHECKPOINTS", "CORRUPT", "CURVES", "DATA", "DOWNSTREAM", "EVAL", "EXPORT", "FILL_MASK", "FINETUNING",
    "KIND_FILE", "LOCK", "META", "METRICS", "OUTPUTS", "PRETRAINING", "READ_ATTEMPTS", "RECIPE", "STATE",
    "TENSORBOARD", "TOKENIZER", "CheckpointWriteError", "Checkpoints", "RecipeMismatch", "WorkdirError",
    "check_placement", "checkpoint_meta", "claim", "claimed", "downstream_dir", "is_workdir", "kind",
    "metric_window", "newest_meta", "newest_task_record", "path", "read_params", "read_recipe", "read_run",
    "recorded_config", "recorded_loader", "run_config", "run_tokenizer_dir", "saved_recipe", "state_tree",
    "task_history", "task_record", "tokenizer_path", "with_metric_window", "workdirs_near",
    "write_recipe",
]
