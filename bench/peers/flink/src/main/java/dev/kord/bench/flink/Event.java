package dev.kord.bench.flink;

/**
 * The fields of an input event the job uses. The event's action and page are
 * read past and dropped: the result does not carry them.
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

    public Event() {}

    public Event(String uuid, long seq, String ts) {
        this.uuid = uuid;
        this.seq = seq;
        this.ts = ts;
    }
}
