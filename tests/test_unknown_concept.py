"""unknown_concept: the chosen name is a real name of the slot's kind that the record lacks and nothing near it."""

from __future__ import annotations

import re

import numpy as np
import pytest

from pipeline.concepts import concept_key, concept_sql
from pipeline.noise.base import Rejected, subtypes
from pipeline.noise.overlay import open_source
from pipeline.noise.slot_swap import concept_slots, vocabulary
from pipeline.noise.subtypes import unknown_concept as uc
from pipeline.templates.instantiate import instantiate
from pipeline.templates.registry import load_templates

TEMPLATES = {t.id: t for t in load_templates()}
CODE_DICTIONARIES = {"d_icd_diagnoses.long_title", "d_icd_procedures.long_title", "d_hcpcs.short_description"}
SLOTS = sorted({(".".join(vocabulary(t, s)), s) for t in TEMPLATES.values() for s in concept_slots(t)})
DATABASES = [pytest.param("demo_db", marks=pytest.mark.realdata), "synthetic_1000"]
# near misses of names the demo has: the blind audit's two typos and one doubled letter of a real ICU
NEAR_MISSES = {
    "icustays.first_careunit": [
        "Mediccal Intensive Care Unit (MICU)",
        "Medical/Surrgical Intensive Care Unit (MICU/SICU)",
    ],
    "d_icd_procedures.long_title": ["Transcatheter embolization for gatric or duodenal bleeding"],
}


@pytest.fixture(params=DATABASES)
def con(request):
    connection = open_source(request.getfixturevalue(request.param))
    yield connection
    connection.close()


def _columns(vocab: str, dictionaries: bool = True) -> list[tuple[str, str]]:
    kin = uc._existing([vocab, *uc.catalogue()[vocab].compare_with])
    return list(dict.fromkeys([*kin, *(uc.dictionary_columns() if dictionaries else ())]))


def _independently_unknown(con, name: str, vocab: str) -> None:
    """Checked in SQL, apart from `close`: no column of the kind or dictionary holds the concept; every name of
    the kind is >= 3 edits away; some word of 4+ letters finds nothing with ILIKE in the slot's own column."""
    table, column = vocab.split(".")
    for t, c in _columns(vocab):
        hits = con.execute(f'SELECT count(*) FROM "{t}" WHERE {concept_sql(c)} = ?', [concept_key(name)]).fetchone()[0]
        assert hits == 0, f"{name!r} is in {t}.{c}"
    for t, c in _columns(vocab, dictionaries=False):
        nearest = con.execute(
            f'SELECT min(levenshtein({concept_sql(c)}, ?)) FROM "{t}"', [concept_key(name)]
        ).fetchone()[0]
        assert nearest is None or nearest >= 3, f"{name!r} is {nearest} edits from a name in {t}.{c}"
    found = [
        con.execute(f'SELECT count(*) FROM "{table}" WHERE "{column}" ILIKE ?', [f"%{w}%"]).fetchone()[0]
        for w in re.findall(r"[a-z]{4,}", concept_key(name))
    ]
    assert 0 in found, f"{name!r}: every word is found by ILIKE in {vocab}"


@pytest.mark.parametrize(("vocab", "slot"), SLOTS)
def test_chosen_names_are_unknown_and_not_close(con, vocab: str, slot: str):
    names = uc.unknown_names(con, vocab, slot)
    if vocab in CODE_DICTIONARIES:
        assert names == ()  # every clinical name has a coded synonym: rejected, never published
        return
    assert len(names) >= 5, f"{vocab}[{slot}]: only {names}"
    for name in names:
        _independently_unknown(con, name, vocab)


@pytest.mark.parametrize("vocab", sorted(NEAR_MISSES))
def test_near_misses_are_refused(con, vocab: str):
    known = uc.known_keys(con, vocab)
    planted = [*uc.catalogue_names(vocab, "careunit"), *NEAR_MISSES[vocab]]
    assert all(not uc.in_any_dictionary(con, n, also=(tuple(vocab.split(".")),)) for n in NEAR_MISSES[vocab])
    assert uc.close(con, NEAR_MISSES[vocab], known) == dict.fromkeys(NEAR_MISSES[vocab], "typo")
    assert not set(uc.unknown_names(con, vocab, "careunit", planted)) & set(NEAR_MISSES[vocab])


def test_close_names_are_never_chosen(con, monkeypatch):
    template = TEMPLATES["mean_urine_output_first_24h_by_careunit"]
    task = instantiate(con, [template], per_template=1, seed=0)[0][0]
    near = NEAR_MISSES["icustays.first_careunit"]
    monkeypatch.setattr(uc, "_UNKNOWN", {})
    monkeypatch.setattr(uc, "catalogue_names", lambda vocab, slot: tuple(near))  # a catalogue of near misses only
    with pytest.raises(Rejected, match="no_unknown_concept"):
        subtypes()["unknown_concept"].make(con, task, template, np.random.default_rng(0))


@pytest.mark.parametrize("template_id", ["mean_urine_output_first_24h_by_careunit", "lab_first_value_within_24h"])
def test_make_picks_deterministically_from_the_unknown_names(con, template_id: str):
    template = TEMPLATES[template_id]
    task = instantiate(con, [template], per_template=1, seed=0)[0][0]
    (slot,) = concept_slots(template)
    make = subtypes()["unknown_concept"].make
    chosen = [make(con, task, template, np.random.default_rng(seed)).patch.slots[slot] for seed in range(6)]
    assert chosen == [make(con, task, template, np.random.default_rng(s)).patch.slots[slot] for s in range(6)]
    assert set(chosen) <= set(uc.unknown_names(con, ".".join(vocabulary(template, slot)), slot))
    assert len(set(chosen)) > 1  # the rng chooses among the candidates
