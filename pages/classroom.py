"""Class: a room for a whole class (issue #43). The teacher opens a room and projects its code
and QR code; students join on their phones and follow the teacher's screen; the teacher asks
what the model will do, the class answers, the projected histogram fills, and the reveal shows
the model's real numbers, with each student's own result on their own screen.

The room lives in the store (`ui/rooms`: a SQLite file, or Redis for several machines), never
in this process, so every app process of a class serves every student of its room.
"""

import streamlit as st

from ui import sidebar
from ui.rooms import live, student, teacher


def landing() -> None:
    """No room yet: join one, or open one as the teacher."""
    st.title("Class")
    st.caption(
        "Predict, then reveal: everyone commits to a guess about the model, the class sees its spread, "
        "then the model's real numbers appear."
    )
    if "teacher" in st.query_params:
        teacher.take_up()
        if live.role() == "teacher":
            st.rerun()
    join, teach = st.columns(2)
    with join:
        st.subheader("Join a class")
        student.join_form()
    with teach:
        st.subheader("Teach a class")
        st.caption(
            "Opens a room with a join code, a link and a QR code to project. The room and its answers "
            "are deleted after 4 hours, or when you close it."
        )
        if st.button("Open a room", key="room.open", icon="🏫"):
            teacher.open_room()


def main() -> None:
    sidebar.render()
    role = live.role()
    if role == "teacher":
        teacher.panel()
    elif role == "student":
        st.title("Class")
        student.panel()
        if st.button("Leave the room", key="room.leave"):
            live.leave()
            st.session_state["room.left"] = True
            st.rerun()
    else:
        landing()


main()
