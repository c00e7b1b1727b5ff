-- The billing service of scripts/quickstart.sh and scripts/image-check.sh: :events
-- transactions (psql -v events=N), each a payment row and its outbox row, 100 wallets,
-- seq 1..N in commit order (the ledger's verdict checks the order per wallet with it).
-- Needs the payments table of those scripts and walrelay's outbox table.
SELECT format('WITH p AS (INSERT INTO payments (wallet, amount, seq) VALUES (%L, %s, %s) RETURNING *)
INSERT INTO outbox (event_id, aggregate_type, aggregate_id, event_type, payload)
SELECT event_id, ''payment'', wallet, ''PaymentCaptured'',
       jsonb_build_object(''wallet'', wallet, ''amount'', amount, ''seq'', seq) FROM p',
  'wallet-' || (g % 100), 100 + (g * 7919) % 900, g)
FROM generate_series(1, :events) g
\gexec
