"""One module per preset; each follows one real provider's documented semantics.

| module | preset name | models |
| --- | --- | --- |
| ``payments`` | ``payments`` | Stripe idempotency keys (24 h, replay, 422 on mismatch, lookup) |
| ``orders`` | ``orders`` | PayPal-Request-Id (6 h up to 72 h, 409 while in flight, lookup) |
| ``queue_fifo`` | ``queue-fifo`` | SQS FIFO MessageDeduplicationId (5 min, no lookup) |
| ``chat`` | ``chat`` | Slack/forum posts (no key, rendered thread, hidden metadata) |
| ``smtp`` | ``smtp`` | plain SMTP with AUTH on loopback (no key, mailbox search) |
| ``webhook`` | ``webhook`` | a Standard Webhooks receiver (webhook-id dedupe on/off) |

The registry (name -> ``PresetSpec``) is ``fake_providers._presets.PRESETS``.
"""
