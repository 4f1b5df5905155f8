"""The manager (``gridcrawl-manager``; folder ``manager/``): the ZeroMQ broker executors register
with and applications submit grid threads to — its pure state machine (:mod:`.core`), per-host
ready queue (:mod:`.queue`), I/O loop (:mod:`.server`), SQL recorder (:mod:`.recorder`) and
dashboard (:mod:`.dashboard`)."""
