import java.nio.file.Path;
import java.util.List;
import java.util.Map;
import java.util.concurrent.atomic.AtomicBoolean;

import org.opensearch.common.settings.Settings;
import org.opensearch.node.InternalSettingsPreparer;
import org.opensearch.node.Node;
import org.opensearch.transport.Netty4Plugin;

/**
 * One OpenSearch node on loopback with HTTP (netty4), for the local service ``opensearch``
 * (exactlyonce/integration/lab/services/opensearch.py) and tests/support/opensearch_node.py.
 *
 * Usage: java OpenSearchNode HOME_DIR HTTP_PORT TRANSPORT_PORT [until-signal]. It prints
 * "OPENSEARCH STARTED" once the node is started, then runs until its stdin closes, or with
 * until-signal until SIGTERM (or it is killed). Either way the node is closed cleanly once (a
 * shutdown hook). The netty4
 * plugin is handed over as a classpath plugin through Node's protected constructor, the way
 * OpenSearch's own MockNode does, without a plugins directory.
 */
public final class OpenSearchNode {
    private static final class ClasspathNode extends Node {
        ClasspathNode(Settings settings) {
            super(
                InternalSettingsPreparer.prepareEnvironment(settings, Map.of(), null, () -> "exactlyonce-node"),
                List.of(Netty4Plugin.class),
                true
            );
        }
    }

    public static void main(String[] args) throws Exception {
        Path home = Path.of(args[0]);
        Settings settings = Settings.builder()
            .put("path.home", home.toString())
            .put("path.data", home.resolve("data").toString())
            .put("path.logs", home.resolve("logs").toString())
            .put("cluster.name", "exactlyonce-opensearch")
            .put("node.name", "exactlyonce-node")
            .put("network.host", "127.0.0.1")
            .put("http.port", args[1])
            .put("transport.port", args[2])
            .put("discovery.type", "single-node")
            .put("http.type", Netty4Plugin.NETTY_HTTP_TRANSPORT_NAME)
            .put("transport.type", Netty4Plugin.NETTY_TRANSPORT_NAME)
            .put("cluster.routing.allocation.disk.threshold_enabled", false)
            .build();
        Node node = new ClasspathNode(settings);
        AtomicBoolean closed = new AtomicBoolean();
        Runnable close = () -> {
            if (closed.compareAndSet(false, true)) {
                try {
                    node.close();
                } catch (Exception e) {
                    e.printStackTrace();
                }
            }
        };
        Runtime.getRuntime().addShutdownHook(new Thread(close, "close-node"));
        node.start();
        System.out.println("OPENSEARCH STARTED");
        System.out.flush();
        if (args.length > 3 && args[3].equals("until-signal")) {
            Thread.currentThread().join(); // until SIGTERM runs the hook
        }
        while (System.in.read() != -1) {
            // run until the parent closes our stdin
        }
        close.run();
        System.exit(0);
    }
}
