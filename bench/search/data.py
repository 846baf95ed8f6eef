"""The jobs' text as the search bench and the hot-path bench make it: SQL expressions of
a row number `i` (for statements with parameters: `%%` is a literal `%`)."""

# A payload of 300-400 characters of JSON: a customer among 50,000, an e-mail address,
# an order, two items, a note and a trace id.
PAYLOAD = """jsonb_build_object(
    'customer_id', 'cus_' || lpad((i %% 50000)::text, 8, '0'),
    'email', 'user' || i %% 50000 || '@'
        || (ARRAY['example.com', 'mail.example.org', 'corp.example.net'])[1 + i %% 3],
    'order', jsonb_build_object('id', 'ord_' || i, 'amount_cents',
        (i::bigint * 7919) %% 100000, 'currency', (ARRAY['EUR', 'USD', 'GBP'])[1 + i %% 3]),
    'items', jsonb_build_array(
        jsonb_build_object('sku', 'sku-' || i %% 997, 'qty', 1 + i %% 4),
        jsonb_build_object('sku', 'sku-' || i %% 389, 'qty', 1)),
    'note', (ARRAY['renewal', 'first purchase', 'upgrade from trial',
        'resend receipt', 'monthly report'])[1 + i %% 5],
    'trace', md5(i::text || 'trace'))"""
# Keys of three kinds: hex digests (60 %), invoices (20 %), planned members (20 %).
KEY = """CASE WHEN i %% 10 < 6 THEN md5(i::text)
    WHEN i %% 10 < 8 THEN 'invoice-' || i || '-' || left(md5(i::text), 8)
    ELSE 'plan:' || i %% 40 || ':' || i / 5000 || ':' || i END"""
