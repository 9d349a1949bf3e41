"""Class rooms in the app (issue #43): a teacher's screen leads, students follow on their phones,
answer questions, and see the model's real answer revealed. The store is `services.rooms`.

`session.py` (this process's store, the session's role), `identity.py` (who a browser is: its
session cookies; whom limits count), `live.py` (the banner every page draws: the teacher's push and
its steps), `follow.py` (a student's screen following the teacher), `warm.py` (each process opens
the teacher's view before its students ask), `teacher.py` and `student.py` (the page's two sides),
`answers.py` (what both see of a question).
"""
