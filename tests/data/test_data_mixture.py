"""Mixtures of prepared folders: the schedule's proportions, per-source epochs, exact and elastic resume.

Two corpora of distinct, recognisable documents (tests/helpers/mixture.py): every word of source `early`
is a letter a-m, every word of `late` a letter n-z, so each row the loader yields tells its folder.
"""

from fractions import Fraction

import numpy as np
import pytest

from jaxbert.data.loader import DataCompatibilityError, MLMLoader, metadata
from jaxbert.data.mixture import Schedule, shares
from tests.helpers.mixture import EARLY_IDS, LATE_IDS, prepare_sources


@pytest.fixture(scope="module")
def folders(tmp_path_factory):
    root = tmp_path_factory.mktemp("mixture")
    sizes = prepare_sources(root, {"early": 400, "late": 150})
    assert sizes["early"] > 2 * sizes["late"] > 100, sizes  # unequal sizes, both repeat within 2,000 rows
    return root, sizes


def unmasked(batch) -> np.ndarray:
    ids = batch["input_ids"].copy()
    b, m = np.nonzero(batch["masked_weights"])
    ids[b, batch["masked_positions"][b, m]] = batch["masked_labels"][b, m]
    return ids


def from_early(batch) -> np.ndarray:
    """bool [B]: each row's words are a-m (else n-z; a row never holds both)."""
    ids = unmasked(batch)
    early, late = np.isin(ids, EARLY_IDS).any(1), np.isin(ids, LATE_IDS).any(1)
    assert not (early & late).any()
    return early


def rows_of(folder) -> set:
    meta = metadata(folder)
    return {r.astype(np.int32).tobytes() for s in meta["splits"]["train"]["shards"] for r in np.load(folder / s["file"])}


def test_two_sources_mixed_3_to_1_give_their_rows_in_that_proportion(folders):
    root, sizes = folders
    loader = MLMLoader([root / "early", root / "late"], 100, 16, weights=[3, 1], seed=4)
    batches = [next(loader) for _ in range(20)]  # 2,000 sequences
    early = np.concatenate([from_early(b) for b in batches])
    assert abs(early.mean() - 0.75) < 0.01, early.mean()
    # every row is a row of the folder it claims, each source on its own epochs
    ids = np.concatenate([unmasked(b) for b in batches])
    mine = {"early": rows_of(root / "early"), "late": rows_of(root / "late")}
    assert all(r.tobytes() in mine["early" if e else "late"] for r, e in zip(ids, early))
    first_pass = [r.tobytes() for r in ids[early][:sizes["early"]]]
    assert set(first_pass) == mine["early"] and len(first_pass) == len(mine["early"])  # each row once per epoch
    read = loader.source_rows()
    assert read == {"early": (int(early.sum()), sizes["early"]), "late": (int((~early).sum()), sizes["late"])}


@pytest.mark.parametrize("tau", [0.0, 0.5, 1.0])
def test_a_temperature_over_sizes_gives_the_expected_proportions(folders, tau):
    root, sizes = folders
    loader = MLMLoader([root / "early", root / "late"], 100, 16, temperature=tau, seed=1)
    want = sizes["early"] ** tau / (sizes["early"] ** tau + sizes["late"] ** tau)
    early = np.concatenate([from_early(next(loader)) for _ in range(30)])
    assert abs(early.mean() - want) < 0.01, (early.mean(), want)
    # at every block boundary the counts are within one row of the proportion
    for position in (1024, 2048, 3072):
        got = loader.schedule.consumed(position)
        assert abs(got[0] - want * position) <= 1 and got.sum() == position, (position, got)


def test_a_mixture_resumes_with_another_batch_size_or_host_count_on_the_same_rows(folders):
    root, _ = folders
    dirs, kw = [root / "early", root / "late"], {"weights": [2, 1], "seed": 3}
    straight = MLMLoader(dirs, 96, 16, **kw)
    want = [next(straight) for _ in range(3)]  # 288 rows
    first = MLMLoader(dirs, 24, 16, **kw)
    got = [next(first) for _ in range(4)]  # 96 rows, then 2 hosts of 16 rows for 6 steps
    hosts = [MLMLoader(dirs, 16, 16, process_index=p, process_count=2, state=first.state(), **kw) for p in range(2)]
    for _ in range(6):
        got += [next(h) for h in hosts]
    for key in ("input_ids", "masked_positions", "masked_labels"):
        np.testing.assert_array_equal(np.concatenate([b[key] for b in got]), np.concatenate([b[key] for b in want]))
    assert hosts[0].state() == hosts[1].state() == straight.state()


def test_a_resume_with_other_weights_sources_or_data_is_refused_by_name(folders):
    root, _ = folders
    dirs = [root / "early", root / "late"]
    saved = MLMLoader(dirs, 8, 16, weights=[3, 1]).state()
    with pytest.raises(DataCompatibilityError, match=r"^data\.sources\[1\]\.weight: .* drew 25\.00% .* late, this "
                                                     r"recipe 50\.00%"):
        MLMLoader(dirs, 8, 16, weights=[1, 1], state=saved)
    MLMLoader(dirs, 8, 16, weights=[6, 2], state=saved)  # the same proportions: the same stream
    with pytest.raises(DataCompatibilityError, match=r"^data\.temperature: "):
        MLMLoader(dirs, 8, 16, temperature=0.3, state=saved)
    with pytest.raises(DataCompatibilityError, match=r"^data\.sources: the run being resumed read \['early', 'late'\]"):
        MLMLoader(dirs[::-1], 8, 16, weights=[1, 3], state=saved)
    with pytest.raises(DataCompatibilityError, match=r"^data\.dir: the run being resumed read the mixture"):
        MLMLoader(dirs[0], 8, 16, state=saved)
    with pytest.raises(DataCompatibilityError, match=r"^data\.sources: the run being resumed read one folder"):
        MLMLoader(dirs, 8, 16, weights=[3, 1], state=MLMLoader(dirs[0], 8, 16).state())
    changed = {**saved, "examples": [saved["examples"][0], saved["examples"][1] + 1]}
    with pytest.raises(DataCompatibilityError, match=r"^data\.sources\[1\] \(.*late\): split 'train' holds"):
        MLMLoader(dirs, 8, 16, weights=[3, 1], state=changed)


def test_the_first_source_of_a_mixture_reads_as_its_folder_alone(folders):
    """A mixture of one folder is that folder's stream (permutation and masking alike)."""
    root, _ = folders
    alone, mixed = MLMLoader(root / "early", 32, 16, seed=2), MLMLoader([root / "early"], 32, 16, weights=[1], seed=2)
    for _ in range(12):  # past the end of the first epoch
        a, m = next(alone), next(mixed)
        for key in a:
            np.testing.assert_array_equal(a[key], m[key])


@pytest.mark.parametrize("weights", [(3, 1), (1, 1, 1), (5, 2, 7, 1), (1000, 1), (0.3, 0.7, 1e-3)])
def test_the_schedule_takes_seats_in_order_of_time_at_any_position(weights):
    w = shares(weights)
    schedule = Schedule(w, seed=0, block=64)
    # the merged order of every seat (2j + 1) / w_i, ties to the lower source, by brute force
    seats = sorted((Fraction(2 * j + 1, wi), i) for i, wi in enumerate(w) for j in range(2500))
    order = np.array([i for _, i in seats[:2000]])
    for rows in [0, 1, 2, 3, 63, 64, 65, 500, 1024, 1999]:
        np.testing.assert_array_equal(schedule.seats(rows), np.bincount(order[:rows], minlength=len(w)))
    source, row = schedule.locate(0, 2000)
    for i in range(len(w)):  # each source's rows in order, none skipped
        np.testing.assert_array_equal(row[source == i], np.arange((source == i).sum()))
    again = Schedule(w, seed=0, block=64)  # a fresh schedule, read from the middle
    np.testing.assert_array_equal(again.locate(777, 300)[0], source[777:1077])
    np.testing.assert_array_equal(again.consumed(1500), np.bincount(source[:1500], minlength=len(w)))
    assert not np.array_equal(Schedule(w, seed=1, block=64).locate(0, 2000)[0], source) or len(set(order)) == 1


def test_a_refused_weight_change_shows_enough_digits_to_see_it(folders):
    """A weight moved from 1 to 1.0001 changes the share by 0.002 points: two decimals printed
    '25.00% ... 25.00%' (#50.8); the message shows as many as tell the two apart."""
    root, _ = folders
    dirs = [root / "early", root / "late"]
    saved = MLMLoader(dirs, 8, 16, weights=[3, 1]).state()
    with pytest.raises(DataCompatibilityError, match=r"drew 25\.000% of its rows from late, this recipe 25\.002%;"):
        MLMLoader(dirs, 8, 16, weights=[3, 1.0001], state=saved)


def test_a_moved_folder_is_refused_with_the_name_that_resumes_it(folders, tmp_path):
    """A source folder moved (its default name, the folder's, changes with it) is refused, and the
    message names the `name:` that resumes the run (#50.9); with that name it resumes on the same rows."""
    import shutil

    root, _ = folders
    dirs = [root / "early", root / "late"]
    first = MLMLoader(dirs, 8, 16, weights=[3, 1], seed=5)
    for _ in range(7):
        next(first)
    saved = first.state()
    moved = tmp_path / "late-moved"
    shutil.copytree(root / "late", moved)
    with pytest.raises(DataCompatibilityError, match=r"^data\.sources: .* if only the folder moved .*"
                                                     r"data\.sources\[1\]\.name: late resumes this run"):
        MLMLoader([dirs[0], moved], 8, 16, weights=[3, 1], seed=5, state=saved)
    resumed = MLMLoader([dirs[0], moved], 8, 16, weights=[3, 1], seed=5, names=["early", "late"], state=saved)
    for _ in range(5):
        a, b = next(first), next(resumed)
        for key in a:
            np.testing.assert_array_equal(a[key], b[key])
    # another source altogether (other rows) gets no such hint
    with pytest.raises(DataCompatibilityError) as e:
        MLMLoader(dirs[::-1], 8, 16, weights=[1, 3], seed=5, state=saved)
    assert "if only the folder" not in str(e.value)


@pytest.mark.parametrize("mixed", [True, False])
def test_take_reads_what_as_many_nexts_read(folders, mixed):
    """take(n), a step's micro-batches in one read (a batch-size warmup's, #50.27), gives the rows and
    masking of n calls of next() for each host, across an epoch boundary, and ends at the same position."""
    root, _ = folders
    data = [root / "early", root / "late"] if mixed else root / "late"
    kw = {"weights": [3, 1]} if mixed else {}
    for p in range(2):
        one, many = (MLMLoader(data, 12, 16, seed=6, process_index=p, process_count=2, **kw) for _ in range(2))
        for n in (1, 3, 5, 2):  # 264 rows: past the end of late's first epoch
            got = many.take(n)
            want = [next(one) for _ in range(n)]
            for key in want[0]:
                np.testing.assert_array_equal(got[key], np.stack([w[key] for w in want]), err_msg=key)
        assert many.state() == one.state()
