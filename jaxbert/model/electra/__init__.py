"""ELECTRA (Clark et al. 2020; transformers' Electra classes, ElectraForCausalLM aside) as a jaxbert family: its
config (``embedding_size`` beside ``hidden_size``), its modules on BERT's encoder, its seven classes and the key
table the converter dispatches to.

    config = ElectraConfig.from_json_file("config.json")          # jaxbert.model.electra.config
    module = FAMILY.build("ElectraForPreTraining", config, ModelOptions(scan_layers=True))
    table = Table(config, "ElectraForPreTraining", scan_layers=True)  # jaxbert.model.electra.table

The rest of jaxbert reaches these through the family registry (jaxbert.model.electra.family). This file imports
nothing, so that the registry's import of the entry loads no model code.
"""
