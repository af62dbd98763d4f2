"""agentrl's credit assignment (GRPO, GiGPO, SCPO) inside other trainers: verl / verl-agent, SkyRL, TRL.

Each framework has its own module, imported only when used (``import agentrl.integrations.verl``), and its own
optional extra (``pip install "agentrl[verl]"``). :mod:`agentrl.integrations.steps` is the shared, NumPy-only part:
it turns a framework's step rows (ids, rewards, token masks) into the flat API's arrays and back. Field mapping per
framework: docs/integrations.md.
"""
