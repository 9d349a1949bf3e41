"""Next-token sampling: how temperature, top-k and top-p reshape the model's next-token choice
(with a masked-LM encoder: its choice for the first [MASK], "fill the [MASK]").

Moving a slider only re-runs `tfm.sampling.next_token` (what generation draws from) on the cached logits of the prompt's
last position (from the shared trace): the model itself is not run again.
"""

import math

import streamlit as st

from tfm.viz import sampling as sampling_figs
from ui import charts, needs, next_controls, sidebar
from ui.run import PromptRun, current_run
from ui.views.next_token import NextTokenView


def metrics(bd, n_words: int) -> None:
    m = st.columns(5)
    m[0].metric(f"Tokens kept (of {n_words:,})", f"{int(bd.n_kept):,}")
    m[1].metric(
        "Mass removed by top-k",
        f"{float(bd.mass_removed_top_k):.2%}",
        help="Probability (after temperature) of the tokens top-k cut.",
    )
    m[2].metric(
        "Mass removed by top-p",
        f"{float(bd.mass_removed_top_p):.2%}",
        help="Probability (after temperature) of the tokens top-p cut from what top-k kept.",
    )
    m[3].metric(
        "Entropy before",
        f"{float(bd.entropy_before):.3f} nats",
        help="Uncertainty of the model's own distribution (T = 1, nothing cut).",
    )
    m[4].metric(
        "Entropy after",
        f"{float(bd.entropy_after) + 0.0:.3f} nats",  # + 0.0: no "-0.000"
        help=f"Uncertainty of the distribution actually sampled from; e^entropy ≈ "
        f"{math.exp(float(bd.entropy_after)):,.1f} equally likely choices.",
    )


def chart(run: PromptRun, view: NextTokenView, bd, at: int, fill: bool, n_words: int) -> None:
    tok = run.lm.tokenizer
    ids = sampling_figs.shown_ids(bd.logits, view.count)
    context = sampling_figs.esc("".join(tok.display_pieces(run.ids[max(at - 5, 0) : at + 1])))  # as the model sees it
    title = sampling_figs.next_token_title(len(ids), n_words, view.temperature, view.top_k, view.top_p)
    fig = sampling_figs.next_token_figure(
        bd,
        ids,
        tok.display_pieces(ids),
        title,
        xtitle="most likely first: "  # two short lines, not one a phone cuts at both ends
        + (f"the token for<br>the [MASK] in “…{context}”" if fill else f"the next token<br>after “…{context}”"),
    )
    charts.show(fig, key="next.chart", config={"displaylogo": False})
    st.caption(
        "Filled bars: probability after temperature, coloured by what happens to the token. "
        "Black outlines: the model's own probability (T = 1). Diamonds: the probability it is "
        "actually sampled with, renormalised over the kept tokens. Purple line (right axis): "
        "running total that top-p compares with p. The small panel on the right sums every token not shown."
    )


def main() -> None:
    sidebar.render()
    st.title("Next-token sampling")
    needs.token_head("Next-token sampling")
    run = current_run()
    at = next_controls.position(run)
    fill = run.lm.config.lm_head == "masked"
    if fill:
        st.subheader("Fill the [MASK]")
    n_words = next_controls.n_words(run)
    view = next_controls.controls(run)
    settings, bd = next_controls.breakdown(run, at, view)
    st.caption(
        (
            "What the model puts in the first [MASK] (it reads the whole prompt, both sides). "
            if fill
            else "What the model predicts after the last prompt token. "
        )
        + f"Temperature, then top-k, then top-p "
        f"(the Hugging Face order), over all {n_words:,} tokens of the vocabulary."
    )
    if settings.greedy:
        st.info(
            "T = 0 means **greedy** decoding: the most likely token is always chosen, so top-k "
            "and top-p have nothing to do and every run gives the same text."
        )
    metrics(bd, n_words)
    chart(run, view, bd, at, fill, n_words)


main()
