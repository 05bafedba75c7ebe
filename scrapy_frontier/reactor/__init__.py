"""Reactor-side helpers shared by the Scrapy shell and the backends: one-shot timers, the
event loop's stall meter, and host lookups that never block the loop."""
