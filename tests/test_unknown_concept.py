"""unknown_concept: the chosen name is a real name of the slot's kind that the record lacks and nothing near it.
Each case is a test on the synthetic source; on the demo one test runs them all and names every failing one."""

from __future__ import annotations

import re
from functools import partial

import numpy as np
import pytest
from aggregate import assert_all_pass

import pipeline.db
from pipeline.concepts import concept_key, concept_sql
from pipeline.noise.base import Rejected, subtypes
from pipeline.noise.slot_swap import concept_slots, vocabulary
from pipeline.noise.subtypes import unknown_concept as uc
from pipeline.templates.instantiate import instantiate
from pipeline.templates.registry import load_templates

TEMPLATES = {t.id: t for t in load_templates()}
CODE_DICTIONARIES = {"d_icd_diagnoses.long_title", "d_icd_procedures.long_title", "d_hcpcs.short_description"}
SLOTS = sorted({(".".join(vocabulary(t, s)), s) for t in TEMPLATES.values() for s in concept_slots(t)})
# near misses of names the demo has: the blind audit's two typos and one doubled letter of a real ICU
NEAR_MISSES = {
    "icustays.first_careunit": [
        "Mediccal Intensive Care Unit (MICU)",
        "Medical/Surrgical Intensive Care Unit (MICU/SICU)",
    ],
    "d_icd_procedures.long_title": ["Transcatheter embolization for gatric or duodenal bleeding"],
}


@pytest.fixture(scope="module")
def con(synthetic_source):
    return synthetic_source


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


def chosen_names_are_unknown_and_not_close(con, vocab: str, slot: str) -> None:
    names = uc.unknown_names(con, vocab, slot)
    if vocab in CODE_DICTIONARIES:
        assert names == ()  # every clinical name has a coded synonym: rejected, never published
        return
    assert len(names) >= 5, f"{vocab}[{slot}]: only {names}"
    for name in names:
        _independently_unknown(con, name, vocab)


def near_misses_are_refused(con, vocab: str) -> None:
    known = uc.known_keys(con, vocab)
    planted = [*uc.catalogue_names(vocab, "careunit"), *NEAR_MISSES[vocab]]
    assert all(not uc.in_any_dictionary(con, n, also=(tuple(vocab.split(".")),)) for n in NEAR_MISSES[vocab])
    assert uc.close(con, NEAR_MISSES[vocab], known) == dict.fromkeys(NEAR_MISSES[vocab], "typo")
    assert not set(uc.unknown_names(con, vocab, "careunit", planted)) & set(NEAR_MISSES[vocab])


def close_names_are_never_chosen(con) -> None:
    template = TEMPLATES["mean_urine_output_first_24h_by_careunit"]
    task = instantiate(con, [template], per_template=1, seed=0)[0][0]
    near = NEAR_MISSES["icustays.first_careunit"]
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(pipeline.db, "_FACTS", {})  # the source facts (unknown names) found so far
        patch.setattr(uc, "catalogue_names", lambda vocab, slot: tuple(near))  # a catalogue of near misses only
        with pytest.raises(Rejected, match="no_unknown_concept"):
            subtypes()["unknown_concept"].make(con, task, template, np.random.default_rng(0))


MAKE_TEMPLATES = ["mean_urine_output_first_24h_by_careunit", "lab_first_value_within_24h"]


def make_picks_deterministically_from_the_unknown_names(con, template_id: str) -> None:
    template = TEMPLATES[template_id]
    task = instantiate(con, [template], per_template=1, seed=0)[0][0]
    (slot,) = concept_slots(template)
    make = subtypes()["unknown_concept"].make
    chosen = [make(con, task, template, np.random.default_rng(seed)).patch.slots[slot] for seed in range(6)]
    assert chosen == [make(con, task, template, np.random.default_rng(s)).patch.slots[slot] for s in range(6)]
    assert set(chosen) <= set(uc.unknown_names(con, ".".join(vocabulary(template, slot)), slot))
    assert len(set(chosen)) > 1  # the rng chooses among the candidates


@pytest.mark.parametrize(("vocab", "slot"), SLOTS)
def test_chosen_names_are_unknown_and_not_close(con, vocab: str, slot: str):
    chosen_names_are_unknown_and_not_close(con, vocab, slot)


@pytest.mark.parametrize("vocab", sorted(NEAR_MISSES))
def test_near_misses_are_refused(con, vocab: str):
    near_misses_are_refused(con, vocab)


def test_close_names_are_never_chosen(con):
    close_names_are_never_chosen(con)


@pytest.mark.parametrize("template_id", MAKE_TEMPLATES)
def test_make_picks_deterministically_from_the_unknown_names(con, template_id: str):
    make_picks_deterministically_from_the_unknown_names(con, template_id)


def test_every_case_holds_on_the_demo(source):
    """The cases above on the real demo's names (its spelling variants, its near misses), failures named together."""
    assert_all_pass(
        [
            *(
                (f"chosen names {vocab}[{slot}]", partial(chosen_names_are_unknown_and_not_close, source, vocab, slot))
                for vocab, slot in SLOTS
            ),
            *(
                (f"near misses {vocab}", partial(near_misses_are_refused, source, vocab))
                for vocab in sorted(NEAR_MISSES)
            ),
            ("close names never chosen", partial(close_names_are_never_chosen, source)),
            *(
                (f"make on {t}", partial(make_picks_deterministically_from_the_unknown_names, source, t))
                for t in MAKE_TEMPLATES
            ),
        ]
    )
