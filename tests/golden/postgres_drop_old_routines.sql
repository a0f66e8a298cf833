DROP FUNCTION IF EXISTS public.claim_next_fila_teste(bigint, text, integer, integer, integer);
