"""Sentence similarity: an encoder's sentence embeddings (mean of the last hidden states over the
tokens, then normalised, as sentence-transformers makes them), their cosine matrix, and which
token pairs make one pair's similarity."""

import streamlit as st

from tfm.viz import encoder as encoder_figs
from ui import charts, links, needs, sidebar
from ui.model_run import ModelRun, active_model
from ui.text import message, plain
from ui.views.similarity import SimilarityView

DEFAULT = (
    "A man is eating food.\nA man is eating a piece of bread.\nThe girl is carrying a baby.\n"
    "A man is riding a horse.\nA woman is playing the violin."
)
MAX_LINES = 8


def embeddings(run: ModelRun, texts: tuple[str, ...]):
    """The sentences' embeddings; ones that cannot be embedded say why and stop the page."""
    try:
        return run.sentence_embeddings(texts)
    except ValueError as e:
        st.error(f"These sentences cannot be embedded: {message(e)}")
        st.stop()


def settings(run: ModelRun, top, pair) -> SimilarityView:
    """The view from the text area (in `top`) and the pair's selectboxes (in `pair`, below the matrix)."""
    links.restore("sim.texts", "sim.a", "sim.b")
    st.session_state.setdefault("sim.texts", DEFAULT)
    text = top.text_area("Sentences, one per line", height=160, **links.keep("sim.texts"))
    texts = tuple(line.strip()[:300] for line in text.splitlines() if line.strip())[:MAX_LINES]
    if len(texts) < 2:
        top.info("Type at least two sentences, one per line.")
        st.stop()
    with top:
        embeddings(run, texts)  # refused before the pair's widgets when they cannot be embedded
    names = labels(texts)
    c1, c2 = pair.columns(2)
    for key, default in (("sim.a", 0), ("sim.b", 1)):
        with pair:
            links.clamp_int(key, 0, len(texts) - 1, default, "sentence")
    a = c1.selectbox("Sentence a", list(range(len(texts))), format_func=lambda i: names[i], **links.keep("sim.a"))
    b = c2.selectbox("Sentence b", list(range(len(texts))), format_func=lambda i: names[i], **links.keep("sim.b"))
    return SimilarityView(texts, a, b)


def labels(texts: tuple[str, ...]) -> list[str]:
    return [f"{i}: {plain(t, limit=40)}" for i, t in enumerate(texts)]


def matrix(emb, names: list[str]) -> None:
    st.caption(
        "Each sentence becomes one vector: the model's last hidden states averaged over its tokens ([CLS] and "
        "[SEP] included, padding left out), then scaled to length 1. Their dot product is the cosine similarity."
    )
    charts.show(
        encoder_figs.cosine_figure(emb.cosine.numpy(), names, "Cosine similarity of the sentence embeddings"),
        key="sim.cosine",
    )


def pair_shares(run: ModelRun, emb, view: SimilarityView) -> None:
    """cos(a, b) split over token pairs, and the tokens of a that add most."""
    a, b = view.a, view.b
    contrib = emb.contributions(a, b)
    pieces = [run.lm.tokenizer.display_pieces(ids) for ids in emb.ids]
    st.caption(
        f"cos(a, b) = {float(emb.cosine[a, b]):.4f} is exactly the sum of the cells below: token i of a with "
        "token j of b contributes h_i · h_j / (n_a n_b |m_a| |m_b|) (h: last hidden states, n: token counts, m: "
        "the means). Row sums are each token of a's share, column sums each token of b's."
    )
    charts.show(
        encoder_figs.contribution_figure(
            contrib.numpy(), pieces[a], pieces[b], f"Token pairs' shares of cos(a, b) = {float(contrib.sum()):.4f}"
        ),
        key="sim.contrib",
    )
    rows = contrib.sum(1)
    top = sorted(range(len(rows)), key=lambda i: -float(rows[i]))[:5]
    st.markdown(
        "Tokens of a that add most: "
        + ", ".join(f"“{plain(pieces[a][i], limit=20)}” {float(rows[i]):+.4f}" for i in top)
    )


def main() -> None:
    sidebar.render()
    st.title("Sentence similarity")
    needs.encoder("Sentence similarity")
    run = active_model()
    top, middle, pair = st.container(), st.container(), st.container()
    view = settings(run, top, pair)
    emb = embeddings(run, view.texts)
    with middle:
        matrix(emb, labels(view.texts))
    pair_shares(run, emb, view)
    links.remember("sim.texts", "sim.a", "sim.b")


main()
