-- The ledger's verdict against the billing tables (scripts/quickstart.sh,
-- scripts/image-check.sh): one row, space-separated with psql -At -F ' ':
--   written  lost  applied_twice  wrong_balances  out_of_order_per_wallet
-- payments(event_id, wallet, amount, seq) is what the billing service wrote; wallet and
-- wallet_credit are what walrelay-ledger applied from Kafka.
WITH lost AS (SELECT count(*) n FROM payments p
              WHERE NOT EXISTS (SELECT 1 FROM wallet_credit c WHERE c.event_id = p.event_id::text)),
     twice AS (SELECT count(*) n FROM (SELECT event_id FROM wallet_credit GROUP BY 1 HAVING count(*) > 1) x),
     balance AS (SELECT count(*) n FROM (SELECT wallet, sum(amount) s FROM payments GROUP BY 1) p
                 FULL JOIN wallet w ON w.id = p.wallet WHERE w.balance IS DISTINCT FROM p.s),
     disorder AS (SELECT count(*) n FROM (SELECT seq < lag(seq) OVER (PARTITION BY wallet ORDER BY applied_order) bad
                                          FROM wallet_credit) x WHERE bad)
SELECT (SELECT count(*) FROM payments), lost.n, twice.n, balance.n, disorder.n
FROM lost, twice, balance, disorder;
