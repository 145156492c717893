"""Fine-tuning a pretrained encoder on a task, as an engine task: its data, its model, its run, its scores.

- The task: ``task_data`` (TaskSpec, TaskData: the task kind, its files and columns, how it is scored);
  ``kinds/`` (one unit per task kind: classification, regression, choice, ``tokens/`` (CoNLL reader,
  tagging windows), ``qa/`` (SQuAD reader, windows, decoding); the KINDS registry); ``glue`` (the GLUE
  tasks as presets).
- Reading and features: ``row_files`` (TSV/CSV/JSONL/parquet rows as dicts), ``readers`` and ``features``
  (what the kinds' readers and features share), ``batching`` (fixed-size batches per bucket length).
- Training: ``recipe`` (the fine-tuning recipe), ``model`` (the encoder under a head sized for the labels),
  ``losses``, ``step`` (a kind's objective for the engine's step), ``loop`` (``finetune``: train, evaluate,
  export the best), ``source_identity`` (which model a workdir was trained from).
- Scores: ``eval_outputs`` (outputs gathered per feature, the class decode), ``metrics`` (the metric
  functions), ``eval_report`` (the evaluation table, eval.json), ``predict`` (predictions and scores from a
  fine-tuned directory).
- Runs built on these: ``glue_run`` (the eight GLUE tasks and their average), ``downstream`` (a pretraining
  run's downstream tasks), ``demo`` (what pretraining buys, on a task from the embedded corpus).
"""
