"""What the tests share, imported as ``from helpers.nodes import make_node`` (pytest puts ``tests/`` on the path;
``tests/`` itself is no package). Nothing here is imported by the product or the benchmarks.

- ``nodes.py``             tiny nodes: a task random tiny models can score on, a node over the in-memory transport
- ``digit_model.py``       a local model folder whose rounds train (tiny-small taught to answer one digit)
- ``swarm.py``             tiny rollout batches, what a peer announces for them, a fake and a movable clock
- ``hivemind_swarm.py``    real-swarm plumbing (marker ``hivemind``): transports on 127.0.0.1, polling, killing
- ``hostile_peer.py``      a hostile member of a real swarm that says and serves whatever a test scripts
- ``swarm_peer.py``        a swarm node in its own OS process (``python -m helpers.swarm_peer``): killed mid-run, or
                           run inside a network namespace by the NAT test
- ``fault_peer.py``        a swarm peer in its own OS process (``python -m helpers.fault_peer``) for the fault tests
- ``child_lines.py``       a helper process's stdout, line by line as it comes
- ``cli_process.py``       ``ftis-node`` run as a user runs it, in a subprocess
- ``join_config.py``       the config file of a tiny node in the ``ftis-node join`` swarm tests
- ``metrics_fakes.py``     hand-built step reports for the metrics and display tests; a node folder made of them
- ``experiment_grids.py``  the ``[quick]`` section the test grids share
- ``logprob_check.py``     sampler log-probs against a teacher-forced recompute of the sampling distribution
- ``loss_cases.py``        the loss tests' grid of settings and their gradient helper
- ``vllm_stand_in.py``     a CPU stand-in for the part of vLLM the vLLM backend uses
- ``real_vllm.py``         the vLLM backend against the real vLLM where this machine has it
- ``netns.py``             ``require_netns``: skips a test where the NAT of ``benchmarks/netns.py`` cannot be built
- ``browser.py``           headless Chromium: the dashboard's page as a browser shows it, and a screenshot
- ``real_tokenizers.py``   the real tokenizers (``bash .ci/tokenizers``), a GSM8K file, a stand-in that answers
- ``real_models.py``       the real pretrained models (``ftis-node models fetch``), a tiny GGUF file (``gguf``)
"""
