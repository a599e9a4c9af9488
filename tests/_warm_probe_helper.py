"""The probe worker's own module: a warm start must never import it in the harness."""

WORK = """SELECT r.run_id, r.input_payload, d.destination
          FROM run_requests r JOIN roster d ON d.topic = r.topic
          ORDER BY r.run_id, d.destination"""
