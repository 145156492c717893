"""`jaxbert train --list` and `--help` name the recipes that ship with jaxbert."""

from jaxbert.cli.main import main


def test_train_list_and_help_name_the_shipped_recipes(capsys):
    assert main(["train", "--list"]) == 0
    listed = capsys.readouterr().out.splitlines()
    names = [line.split()[0] for line in listed]
    assert "tiny-demo" in names and "bert-base-phase1" in names and len(names) == len(set(names)) >= 6
    assert any(line.startswith("tiny-demo") and "default" in line for line in listed)
    try:
        main(["train", "--help"])
    except SystemExit as e:
        assert e.code == 0
    help_text = "".join(capsys.readouterr().out.split())  # argparse wraps lines at hyphens too
    assert "configs/train" not in help_text and "--list" in help_text
    assert all(n in help_text for n in names)
