DROP PROCEDURE IF EXISTS public.claim_next_fila_teste;
