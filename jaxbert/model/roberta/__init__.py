"""RoBERTa and XLM-RoBERTa: BERT's encoder with RoBERTa's position ids, MLM head and sequence classifier
(modules.py). Its registry entry is family.py (FAMILY)."""
