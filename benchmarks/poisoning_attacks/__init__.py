"""The attackers of ``benchmarks/poisoning.py`` (the attacks of "Hail to the Thief", arXiv:2511.09780) and what the
benchmark measures about them.

- ``payloads.py``  what each attacker writes (text only): the poisoned completion of a problem, split around its
                   payload, the wrong ones beside it, and how a completion is recognised as carrying the payload
- ``attacker.py``  its batches, built as a real peer sends them (plausible log-probs: teacher-forced through a copy of
                   the victim's starting model), and the lockstep member that publishes one a round
- ``audit.py``     the step audit (which attacker completions a node's step raises), attack success on greedy
                   completions, the node's own log-prob of a payload in context
- ``report.py``    the figures over seeds, paired against clean, and the markdown report
"""
