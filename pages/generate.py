"""Generation & timeline: watch tokens arrive, scrub back through how each one was chosen,
compare two temperatures on the same seed, and measure what the KV cache buys.

Stop: the Stop button is an ordinary Streamlit button. Clicking any widget while the script
runs makes Streamlit interrupt the run at its next `st` call, and ui.gen_views.stream makes one
after every step (the text redraw), so generation stops between two steps. The steps made so
far are already in `st.session_state["gen.last"]`, so the rerun shows them and their timeline.
"""
import streamlit as st

from tfm.generation.generate import n_words, prepare_prompt
from tfm.loaders.limits import check_generation
from tfm.generation.sampling import SamplingSettings, usable_settings
from tfm.viz import sampling as sampling_figs
from ui import gen_views, links, needs, sidebar
from services import server
from ui.gen_chat import chat_controls
from ui.gen_views import GenPage, compare, cache_speed, run_all, show_texts, step_views, usable
from ui.model_run import active_model
from ui.text import message

KEYS = ("gen.max_new", "gen.temperature", "gen.top_k", "gen.top_p", "gen.n_samples", "gen.use_cache",
        "cmp.t_left", "cmp.t_right")
DEFAULTS = dict(zip(KEYS, (40, 0.8, 0, 1.0, 1, True, 0.2, 1.5)))
STOPS = {"eot": "end of text", "stop_token": "end of turn", "max_new_tokens": "token count reached",
         "context_full": "context full"}

sidebar.render()
st.title("Generation & timeline")
needs.next_token_head("Generation")
model = active_model()
if model is None:
    st.stop()
lm = model.lm
ss = st.session_state
seed = int(ss["sidebar.seed"])
chat = chat_controls(lm)  # None unless the model has a chat template and chat mode is on
prompt = ss["sidebar.prompt"] if chat is None else chat.ids
try:
    info = prepare_prompt(lm, prompt)
except ValueError as e:
    st.error(f"This prompt cannot be used: {message(e)}")
    st.stop()
if info.notice:
    st.warning(f"Prompt: {message(info.notice)}.")
ctx = lm.config.context_length
max_new_limit = server.limits().max_new_tokens  # the server's cap: long runs are slow on a CPU, shared
cap = max(1, min(max_new_limit, ctx - len(info.ids)))
why = ("this server's limit" if cap == max_new_limit else
       f"the context holds {ctx} tokens and the prompt uses {len(info.ids)}")

links.restore(*KEYS)
for key, value in DEFAULTS.items():
    ss.setdefault(key, value)
ss["gen.max_new"] = min(max(int(ss["gen.max_new"]), 1), cap)
s0 = usable_settings(ss["gen.temperature"], ss["gen.top_k"], ss["gen.top_p"], n_words(lm))
ss["gen.temperature"], ss["gen.top_k"], ss["gen.top_p"] = s0.temperature, s0.top_k, s0.top_p
for key in ("gen.temperature", "cmp.t_left", "cmp.t_right"):
    ss[key] = sampling_figs.nearest_temperature(ss[key])

c = st.columns([2, 4, 2, 3, 1.6, 2.4])
max_new = c[0].number_input("New tokens", 1, cap, **links.keep("gen.max_new"), help=f"At most {cap}: {why}.")
temperature = c[1].select_slider("Temperature", sampling_figs.TEMPERATURES, format_func=sampling_figs.temperature_label,
                                 **links.keep("gen.temperature"), help="0 is greedy: always the most likely token.")
top_k = c[2].number_input("Top-k (0 = off)", 0, n_words(lm), step=1, **links.keep("gen.top_k"))
top_p = c[3].slider("Top-p (1 = off)", 0.0, 1.0, step=0.01, **links.keep("gen.top_p"))
n_samples = c[4].number_input("Samples", 1, 4, **links.keep("gen.n_samples"),
                              help="Side by side, with seeds seed, seed+1, …: how different can runs be?")
use_cache = c[5].toggle("KV cache", **links.keep("gen.use_cache"),
                        help="Reuse the keys and values of earlier positions instead of re-running the prefix.")
st.caption(f"At most **{cap}** new tokens here ({why}). Seed {seed} (sidebar); the same seed and "
           "settings always give the same text.")
try:  # widgets cannot produce bad values; anything else is still refused politely
    settings = SamplingSettings(temperature, int(top_k), float(top_p))
except ValueError as e:
    st.error(f"These sampling settings cannot be used: {message(e)}")
    st.stop()
g = GenPage(lm, (model.spec, model.device), prompt, info, seed, int(max_new), settings, chat.stop_ids if chat else frozenset())


def generation() -> dict | None:
    """Buttons, live text columns, and the last generation's summary."""
    b1, b2, _ = st.columns([1, 1, 6])
    go_clicked = b1.button("Generate", key="gen.run", type="primary")
    b2.button("Stop", key="gen.stop", help="Stops between two steps; the tokens made so far stay.")
    slots = [col.empty() for col in st.columns(int(n_samples))]
    if go_clicked:
        try:  # the server's bounds, whatever the widgets sent
            check_generation(lm.config, server.limits(), len(info.ids), int(max_new), int(n_samples))
        except ValueError as e:
            st.error(f"Not generated: {message(e)}.")
            return None
        ss["gen.last"] = {}
        with gen_views.generation_slot(use_cache):  # batched rows take no heavy slot
            run_all(g, [settings] * n_samples, [seed + i for i in range(n_samples)], True, use_cache, slots,
                    ss["gen.last"])
    last = ss.get("gen.last")
    if not usable(g, last):
        st.info("Press **Generate** to sample text with these settings.")
        return None
    show_texts(g, last, slots + [st.empty() for _ in range(len(last["samples"]) - len(slots))])
    for col, sd, recs in zip(st.columns(len(last["samples"])), last["seeds"], last["samples"]):
        reason = recs[-1].stop_reason
        reason = "stop_token" if chat is not None and reason == "eot" else reason  # a chat's eos ends its turn
        col.caption(f"seed {sd}: {len(recs)} tokens, stop: {STOPS.get(reason, reason) or 'interrupted'}")
    n_tok, s = sum(len(r) for r in last["samples"]), last["settings"][0]
    st.markdown(f"**{n_tok} tokens in {last['seconds']:.2f} s = {n_tok / max(last['seconds'], 1e-9):.1f} tokens/s** "
                f"(KV cache {'on' if last['use_cache'] else 'off'}; "
                f"T = {sampling_figs.temperature_label(s.temperature)}, top-k = {s.top_k or 'off'}, top-p = {s.top_p:g}).")
    return last


def timeline(last: dict) -> None:
    """A scrubber over the generated tokens: how each one was chosen."""
    st.header("Timeline: how each token was chosen")
    pick = 0
    if len(last["samples"]) > 1:
        ss["gen.sample"] = min(int(ss.get("gen.sample", 0)), len(last["samples"]) - 1)
        pick = st.radio("Sample", range(len(last["samples"])), horizontal=True, key="gen.sample",
                        format_func=lambda j: f"seed {last['seeds'][j]}")
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


last = generation()
if last is not None:
    timeline(last)
compare(g)
cache_speed(g)
