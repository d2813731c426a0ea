package dev.kord.bench.flink;

/**
 * The fields of an input event the job uses. The event's action and page
 * are kept only with --lake (the lake's rows carry them, and its buckets
 * are by action); without it they are read past, and null.
 *
 * <p>A Flink POJO (public fields, public no-argument constructor), so that
 * Flink serializes it between the source and the counting operator with its
 * own POJO serializer instead of Kryo.
 */
public class Event {
    /** The user's uuid, the key. */
    public String uuid;
    /** The user's event number, from 0. */
    public long seq;
    /** When the event was produced, RFC 3339, kept as the input's string. */
    public String ts;
    /** The event's action ("view", "click", ...): with --lake only, else null. */
    public String action;
    /** The event's page ("/item/7"): with --lake only, else null. */
    public String page;

    public Event() {}

    public Event(String uuid, long seq, String ts, String action, String page) {
        this.uuid = uuid;
        this.seq = seq;
        this.ts = ts;
        this.action = action;
        this.page = page;
    }
}
