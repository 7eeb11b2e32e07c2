"""The hosts of a multi-host run, and what they share through the store they already have.

`agreement` (a small collective at a step: `JaxAgreement` over jax.distributed's key-value
store, `TorchAgreement` over torch.distributed's store through `torch_store`, both running
`key_value_agreement`), `heartbeat` (a host that is slow told from one that is gone), `uneven`
(every host's epoch ends at the same step), `pod` (each host's summary of its input, shared
every interval: `pod_summary`; process 0's verdict on which host holds the step:
`pod_verdict`), `clock_offset` (each host's trace clock against process 0's, for `tpufeed
trace merge`).
"""
