"""Generation & timeline: watch tokens arrive, scrub back through how each one was chosen,
compare two temperatures on the same seed, and measure what the KV cache buys.

Stop: the Stop button is an ordinary Streamlit button. Clicking any widget while the script
runs makes Streamlit interrupt the run at its next `st` call, and ui.gen_views.stream makes one
after every step (the text redraw), so generation stops between two steps. The steps made so
far are already in `st.session_state["gen.last"]`, so the rerun shows them and their timeline.
"""

import streamlit as st

from tfm.viz import sampling as sampling_figs
from ui import gen_settings, gen_views, needs, sidebar
from ui.gen_chat import chat_controls
from ui.gen_compare import cache_speed, compare
from ui.gen_views import GenPage, run_all, show_texts, step_views, usable
from ui.model_run import active_model
from ui.views.generate import GenerateView

STOPS = {
    "eot": "end of text",
    "stop_token": "end of turn",
    "max_new_tokens": "token count reached",
    "context_full": "context full",
}


def summary(last: dict, chat) -> None:
    """Each sample's length and why it stopped, and the speed of the last generation."""
    for col, sd, recs in zip(st.columns(len(last["samples"])), last["seeds"], last["samples"]):
        reason = recs[-1].stop_reason
        reason = "stop_token" if chat is not None and reason == "eot" else reason  # a chat's eos ends its turn
        col.caption(f"seed {sd}: {len(recs)} tokens, stop: {STOPS.get(reason, reason) or 'interrupted'}")
    n_tok, s = sum(len(r) for r in last["samples"]), last["settings"][0]
    st.markdown(
        f"**{n_tok} tokens in {last['seconds']:.2f} s = {n_tok / max(last['seconds'], 1e-9):.1f} tokens/s** "
        f"(KV cache {'on' if last['use_cache'] else 'off'}; "
        f"T = {sampling_figs.temperature_label(s.temperature)}, top-k = {s.top_k or 'off'}, top-p = {s.top_p:g})."
    )


def generation(g: GenPage, view: GenerateView, chat) -> dict | None:
    """Buttons, live text columns, and the last generation's summary."""
    ss, n_samples = st.session_state, view.n_samples
    b1, b2, _ = st.columns([1, 1, 6])
    go_clicked = b1.button("Generate", key="gen.run", type="primary")
    b2.button("Stop", key="gen.stop", help="Stops between two steps; the tokens made so far stay.")
    slots = [col.empty() for col in st.columns(n_samples)]
    if go_clicked:
        if not gen_settings.allowed(g.lm, g.info, view):  # the server's bounds, whatever the widgets sent
            return None
        ss["gen.last"] = {}
        with gen_views.generation_slot(view.use_cache):  # batched rows take no heavy slot
            run_all(
                g,
                [g.settings] * n_samples,
                [g.seed + i for i in range(n_samples)],
                True,
                view.use_cache,
                slots,
                ss["gen.last"],
            )
    last = ss.get("gen.last")
    if not usable(g, last):
        st.info("Press **Generate** to sample text with these settings.")
        return None
    show_texts(g, last, slots + [st.empty() for _ in range(len(last["samples"]) - len(slots))])
    summary(last, chat)
    return last


def timeline(g: GenPage, last: dict) -> None:
    """A scrubber over the generated tokens: how each one was chosen."""
    ss = st.session_state
    st.header("Timeline: how each token was chosen")
    pick = 0
    if len(last["samples"]) > 1:
        ss["gen.sample"] = min(int(ss.get("gen.sample", 0)), len(last["samples"]) - 1)
        pick = st.radio(
            "Sample",
            range(len(last["samples"])),
            horizontal=True,
            key="gen.sample",
            format_func=lambda j: f"seed {last['seeds'][j]}",
        )
    recs = last["samples"][pick]
    ss["gen.step"] = min(int(ss.get("gen.step", 0)), len(recs) - 1)
    i = st.slider("Generated token", 0, len(recs) - 1, key="gen.step") if len(recs) > 1 else 0
    r = recs[i]
    m = st.columns(6)
    m[0].metric(f"Token {i} (pos. {r.position})", r.display, help=f"token id {r.token_id}")
    m[1].metric("Sampled with p", f"{r.prob:.4f}", help="Its probability after temperature, top-k and top-p.")
    m[2].metric("Rank", f"{r.rank + 1}", help="Among the kept tokens; 1 = the most likely.")
    m[3].metric("Model's own p", f"{r.prob_original:.4f}", help="T = 1, nothing cut.")
    m[4].metric("Model's rank", f"{r.rank_original + 1:,}", help="Among all tokens, T = 1.")
    m[5].metric("Tokens kept", f"{r.n_kept:,}", help="After top-k and top-p at this step.")
    step_views(g, i, r, last["settings"][pick], list(last["prompt_ids"]) + [x.token_id for x in recs])


def main() -> None:
    shown = sidebar.render()
    st.title("Generation & timeline")
    needs.next_token_head("Generation")
    model = active_model()
    if model is None:
        st.stop()
    lm = model.lm
    chat = chat_controls(lm)  # None unless the model has a chat template and chat mode is on
    prompt = shown.prompt if chat is None else chat.ids
    info = gen_settings.prepared(lm, prompt)
    cap, why = gen_settings.room(lm, info)
    view = gen_settings.controls(lm, cap, why, shown.seed)
    g = GenPage(
        lm,
        (model.spec, model.device),
        prompt,
        info,
        shown.seed,
        view.max_new,
        gen_settings.sampling(view),
        chat.stop_ids if chat else frozenset(),
    )
    last = generation(g, view, chat)
    if last is not None:
        timeline(g, last)
    compare(g)
    cache_speed(g)


main()
